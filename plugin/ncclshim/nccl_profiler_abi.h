/*
 * Mirror of the NCCL profiler plugin ABI v5 (NCCL 2.28.3) and v6 (2.29.2), written from NCCL's
 * src/include/plugin/nccl_profiler.h (event type bits, event states) and
 * src/include/plugin/profiler/profiler_v5.h, profiler_v6.h (descriptors, state arguments, the
 * plugin structs). Layouts must stay identical to NCCL's: the checks below pin them on LP64.
 */
#ifndef COLLPLAN_NCCL_PROFILER_ABI_H
#define COLLPLAN_NCCL_PROFILER_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl_tuner_abi.h"

/* Event type bits (also the activation mask's bits). */
enum {
  ncclProfileGroup = 1 << 0,
  ncclProfileColl = 1 << 1,
  ncclProfileP2p = 1 << 2,
  ncclProfileProxyOp = 1 << 3,
  ncclProfileProxyStep = 1 << 4,
  ncclProfileProxyCtrl = 1 << 5,
  ncclProfileKernelCh = 1 << 6,
  ncclProfileNetPlugin = 1 << 7,
  ncclProfileGroupApi = 1 << 8,
  ncclProfileCollApi = 1 << 9,
  ncclProfileP2pApi = 1 << 10,
  ncclProfileKernelLaunch = 1 << 11,
  ncclProfileCeColl = 1 << 12, /* v6 */
  ncclProfileCeSync = 1 << 13, /* v6 */
  ncclProfileCeBatch = 1 << 14, /* v6 */
};

/* Only the state the shim reads is named; NCCL passes others (proxy, group API, CE states). */
typedef enum {
  ncclProfilerKernelChStop = 22,
  ncclProfilerEventStateMax_ = 0x7fffffff /* int-sized, as NCCL's enum */
} ncclProfilerEventState_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v6_t;

/* The descriptor's union members the two versions share (v5 order). */
#define CP_PROFILER_DESCR_V5_MEMBERS \
  struct {                           \
    bool graphCaptured;              \
    int groupDepth;                  \
  } groupApi;                        \
  struct {                           \
    const char* func;                \
    size_t count;                    \
    const char* datatype;            \
    int root;                        \
    void* stream;                    \
    bool graphCaptured;              \
  } collApi;                         \
  struct {                           \
    const char* func;                \
    size_t count;                    \
    const char* datatype;            \
    void* stream;                    \
    bool graphCaptured;              \
  } p2pApi;                          \
  struct {                           \
    void* stream;                    \
  } kernelLaunch;                    \
  struct {                           \
    uint64_t seqNumber;              \
    const char* func;                \
    void const* sendBuff;            \
    void* recvBuff;                  \
    size_t count;                    \
    int root;                        \
    const char* datatype;            \
    uint8_t nChannels;               \
    uint8_t nWarps;                  \
    const char* algo;                \
    const char* proto;               \
    void* parentGroup;               \
  } coll;                            \
  struct {                           \
    const char* func;                \
    void* buff;                      \
    const char* datatype;            \
    size_t count;                    \
    int peer;                        \
    uint8_t nChannels;               \
    void* parentGroup;               \
  } p2p;                             \
  struct {                           \
    pid_t pid;                       \
    uint8_t channelId;               \
    int peer;                        \
    int nSteps;                      \
    int chunkSize;                   \
    int isSend;                      \
  } proxyOp;                         \
  struct {                           \
    int step;                        \
  } proxyStep;                       \
  struct {                           \
    uint8_t channelId;               \
    uint64_t pTimer; /* GPU globaltimer at the channel's start (ns) */ \
  } kernelCh;                        \
  struct {                           \
    int64_t id;                      \
    void* data;                      \
  } netPlugin;

typedef struct {
  uint64_t type;   /* one ncclProfile* bit */
  void* parentObj; /* the parent's handle (a KernelCh's parent is its Coll) */
  int rank;
  union {
    CP_PROFILER_DESCR_V5_MEMBERS
  };
} ncclProfilerEventDescr_v5_t;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    CP_PROFILER_DESCR_V5_MEMBERS
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer; /* GPU globaltimer at the channel's stop (ncclProfilerKernelChStop) */
  } kernelCh;
  struct {
    uint64_t pTimer;
  } kernelStep;
} ncclProfilerEventStateArgs_v5_t;
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v5_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v6_t eState,
                                   ncclProfilerEventStateArgs_v6_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;

/* Layout checks (LP64). */
_Static_assert(sizeof(ncclProfilerEventState_t) == sizeof(int), "event state is int-sized");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, parentObj) == 8, "v5 parentObj");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, rank) == 16, "v5 rank");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll) == 24, "v5 union offset");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.func) == 32, "v5 coll.func");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.count) == 56, "v5 coll.count");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.datatype) == 72, "v5 coll.datatype");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.nChannels) == 80, "v5 coll.nChannels");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.algo) == 88, "v5 coll.algo");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.proto) == 96, "v5 coll.proto");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.parentGroup) == 104, "v5 coll.parentGroup");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, kernelCh.pTimer) == 32, "v5 kernelCh.pTimer");
_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) == 112, "v5 descriptor size");
_Static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.parentGroup) == 104, "v6 coll.parentGroup");
_Static_assert(offsetof(ncclProfilerEventDescr_v6_t, kernelCh.pTimer) == 32, "v6 kernelCh.pTimer");
_Static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.stream) == 104, "v6 ceColl.stream");
_Static_assert(sizeof(ncclProfilerEventDescr_v6_t) == 112, "v6 descriptor size");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v5_t) == 8, "state args size");
_Static_assert(sizeof(ncclProfiler_v5_t) == 6 * sizeof(void*), "ncclProfiler_v5_t layout");
_Static_assert(sizeof(ncclProfiler_v6_t) == 6 * sizeof(void*), "ncclProfiler_v6_t layout");

#endif
