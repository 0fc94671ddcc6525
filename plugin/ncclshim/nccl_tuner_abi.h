/*
 * Minimal mirror of the NCCL types that the tuner plugin ABI uses (v2..v6), written from
 * NCCL's headers: src/include/nccl.h (ncclResult_t), src/include/nccl_common.h (log levels,
 * subsystems, logger, ncclFunc_t), src/include/plugin/nccl_tuner.h (algorithm/protocol
 * indices) and src/include/plugin/tuner/tuner_v{2..7}.h (the structs; v7 from NCCL master at
 * commit 2449986f, in no release yet). Layouts and enum values must stay identical to NCCL's:
 * one binary serves NCCL 2.21 to 2.30 (and master with `make shim TUNER_V7=1`).
 */
#ifndef COLLPLAN_NCCL_TUNER_ABI_H
#define COLLPLAN_NCCL_TUNER_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclFuncAlltoAll = 8,
  ncclFuncScatter = 9,
  ncclFuncGather = 10,
  ncclFuncAllGatherV = 11,
  ncclFuncPutSignal = 12,
  ncclFuncSignal = 13,
  ncclFuncWaitSignal = 14,
  ncclNumFuncs = 15
} ncclFunc_t;

#define NCCL_NUM_FUNCTIONS 5 /* the collectives NCCL computes a cost table for */

#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6

#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2

#define NCCL_ALGO_PROTO_IGNORE -1.0

#define NCCL_NUM_ALGORITHMS_V5 7
#define NCCL_NUM_PROTOCOLS_V5 3
#define NCCL_NUM_HW_LINKS_V5 3
#define NCCL_NUM_COMPCAPS_V5 4
#define NCCL_NUM_TUNING_SCALES_V5 3

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;

typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;

/* 2.21 */
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                              int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

/* 2.22 */
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

/* 2.24 */
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

/* 2.28 */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

/* 2.30 */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v6_t* nvlDomainInfo, ncclTunerConstants_v6_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, ncclFunc_t collType, size_t nBytes, int algo, int proto,
                               int nChannels, size_t* chunkSize);
} ncclTuner_v6_t;

/* master (2449986f), not released: the v6 functions; the constants' five bandwidth arrays gain a fifth
 * compute-capability row (index 4, Rubin) and NVL domain info is v5's. */
#define NCCL_NUM_COMPCAPS_V7 5
#define NCCL_RUBIN_COMPCAP_IDX 4
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v7_t;

typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
  double llMaxBws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES_V5];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v7_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v7_t* nvlDomainInfo, ncclTunerConstants_v7_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, ncclFunc_t collType, size_t nBytes, int algo, int proto,
                               int nChannels, size_t* chunkSize);
} ncclTuner_v7_t;

/* Layout checks (LP64, as every NCCL platform). */
_Static_assert(sizeof(ncclNvlDomainInfo_v5_t) == 12, "ncclNvlDomainInfo_v5_t layout");
_Static_assert(sizeof(ncclTunerConstants_v5_t) == 144 * sizeof(double), "ncclTunerConstants_v5_t layout");
_Static_assert(offsetof(ncclTunerConstants_v5_t, hwLatencies) == 21 * sizeof(double), "hwLatencies offset");
_Static_assert(offsetof(ncclTunerConstants_v5_t, llMaxBws) == 84 * sizeof(double), "llMaxBws offset");
_Static_assert(offsetof(ncclTunerConstants_v5_t, perChMaxNVLSTreeBws) == 132 * sizeof(double), "NVLSTree offset");
_Static_assert(sizeof(ncclTuner_v2_t) == 4 * sizeof(void*), "ncclTuner_v2_t layout");
_Static_assert(sizeof(ncclTuner_v5_t) == 4 * sizeof(void*), "ncclTuner_v5_t layout");
_Static_assert(sizeof(ncclTuner_v6_t) == 5 * sizeof(void*), "ncclTuner_v6_t layout");
/* v7 constants: 21 + 63 doubles of latencies as v5, then five [5][3] arrays (159 doubles). */
_Static_assert(sizeof(ncclTunerConstants_v7_t) == 159 * sizeof(double), "ncclTunerConstants_v7_t layout");
_Static_assert(offsetof(ncclTunerConstants_v7_t, hwLatencies) == 21 * sizeof(double), "v7 hwLatencies offset");
_Static_assert(offsetof(ncclTunerConstants_v7_t, llMaxBws) == 84 * sizeof(double), "v7 llMaxBws offset");
_Static_assert(offsetof(ncclTunerConstants_v7_t, perChMaxRingLL128Bws) == 99 * sizeof(double), "v7 RingLL128 offset");
_Static_assert(offsetof(ncclTunerConstants_v7_t, perChMaxTreeLL128Bws) == 114 * sizeof(double), "v7 TreeLL128 offset");
_Static_assert(offsetof(ncclTunerConstants_v7_t, perChMaxTreeBws) == 129 * sizeof(double), "v7 TreeBws offset");
_Static_assert(offsetof(ncclTunerConstants_v7_t, perChMaxNVLSTreeBws) == 144 * sizeof(double), "v7 NVLSTree offset");
_Static_assert(sizeof(ncclTuner_v7_t) == 5 * sizeof(void*), "ncclTuner_v7_t layout");
_Static_assert(offsetof(ncclTuner_v7_t, getChunkSize) == 4 * sizeof(void*), "ncclTuner_v7_t getChunkSize slot");
_Static_assert(sizeof(ncclFunc_t) == sizeof(int), "ncclFunc_t is an int-sized enum");
_Static_assert(sizeof(ncclResult_t) == sizeof(int), "ncclResult_t is an int-sized enum");

#endif
