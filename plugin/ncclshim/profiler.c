/*
 * The NCCL profiler plugin (ABI v5 and v6) inside libnccl-tuner-collplan.so: it records, per
 * communicator, what each collective ran as (coll, algo, proto, nChannels, bytes, numPipeOps) and
 * how long its kernel channels took, and appends them to a JSONL dump (docs/profile-dump.md).
 *
 * - init activates only Coll and KernelCh events. NCCL also sends the kernel plan's Group event
 *   while Coll is active; the shim keeps it to count the plan's collectives (numPipeOps: the
 *   group's collective count; NCCL's tuner sees ceil(nTasksColl / the comm's channels), which the
 *   events cannot give, and which is 1 whenever the count is at most the channel count).
 * - A Coll event's stop means "enqueued". Its descriptor's nChannels is the number of KernelCh
 *   events that will name it as parent; the collective is done when it is stopped and all its
 *   channels are. Its duration is the last channel stop minus the first channel start, both GPU
 *   globaltimer stamps (KernelCh start's pTimer, ncclProfilerKernelChStop's pTimer).
 * - Events come from a preallocated pool per communicator (a mutex held for a pop or a push); a
 *   finished collective is copied into the communicator's ring under another mutex held only for
 *   that copy, or for the flush's swap of the ring with its spare. A full pool or ring drops and
 *   counts. No lock the event path takes is ever held across I/O.
 * - A flush thread (started at the first init, joined at the last finalize) appends every
 *   COLLPLAN_PROFILE_FLUSH_S seconds, and at once when a ring is half full; finalize appends the
 *   rest and a final line with the counts. Appends are batched into ~64 KiB writes.
 */
#define _GNU_SOURCE /* gethostname, O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "names.h"
#include "nccl_profiler_abi.h"

#define CP_EXPORT __attribute__((visibility("default")))
#define CP_PROFILE_SCHEMA 1
#define CP_POOL_EVENTS 4096u      /* in-flight events per communicator */
#define CP_RING_DEFAULT 8192u     /* finished collectives buffered per communicator between flushes */
#define CP_END_RESERVE 512u       /* bytes of the cap kept for the final line */
#define CP_FLUSH_DEFAULT_S 10.0
#define CP_MAX_MB_DEFAULT 64.0
#define CP_WRITE_BATCH (64u << 10)

enum { EV_FREE = 0, EV_GROUP, EV_COLL, EV_KCH };

/* One finished collective, as it goes to the dump. */
typedef struct {
  uint64_t seq, count, bytes;
  uint64_t start, stop; /* first channel start, last channel stop (GPU ns) */
  int32_t numPipeOps;   /* -1: unknown */
  uint16_t nChannels, nKernelCh;
  char func[16], algo[16], proto[8], dtype[16];
} cp_rec;

struct cp_pcomm;

typedef struct cp_pev {
  struct cp_pev* next; /* free list */
  struct cp_pcomm* comm;
  atomic_int refs;
  atomic_int kind; /* EV_*: read by as_event on handles NCCL passes back */
  union {
    struct {
      atomic_int nColl; /* Coll events started under this Group (the kernel plan's collectives) */
    } group;
    struct {
      cp_rec rec;
      int funcIdx;
      struct cp_pev* group;
      _Atomic uint64_t minStart, maxStop;
      atomic_int stamps; /* channels that reported both stamps */
    } coll;
    struct {
      struct cp_pev* coll;
      uint64_t start, stop;
      int stopped;
    } kch;
  };
} cp_pev;

typedef struct cp_pcomm {
  struct cp_pcomm* next; /* g_comms */
  atomic_int refs;       /* the list's and a flusher's */
  int version;
  uint64_t commId;
  char commName[128];
  int named; /* commName went into the tuner's map (names.h): drop it when the comm is freed */
  int hasName;
  int nNodes, nRanks, rank;
  ncclDebugLogger_t log;
  char path[4096];

  pthread_mutex_t poolMu; /* a pop or a push */
  cp_pev* pool;
  cp_pev* freeList;

  pthread_mutex_t ringMu; /* a record copy, or the flush's swap */
  cp_rec* ring;
  cp_rec* spare;
  uint32_t ringLen, ringCap;

  pthread_mutex_t flushMu; /* one flusher at a time; never taken by the event path */
  int fd;
  uint64_t written, capBytes, records;
  int capped; /* a record met the cap: every later one is dropped */

  atomic_ullong dropRing, dropPool, dropCap, dropIo, unfinished;

  /* Test hooks (the profiler harness's blocking check): every periodic flush sleeps this long
   * after its swap, as a slow disk would, holding flushMu, or ringMu as a buggy flush would. */
  long testIoDelayMs;
  int testHoldRing;
} cp_pcomm;

/* ---- settings (read at each init; bad values fail the init) ---- */
typedef struct {
  const char* dir;
  double flushS, maxMB;
  uint32_t ring;
} cp_settings;

static int parse_nonneg(const char* name, double def, double* out) {
  const char* v = getenv(name);
  if (v == NULL || *v == '\0') {
    *out = def;
    return 0;
  }
  char* end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  int converted = end != NULL && end != v; /* before skipping blanks: " " converts nothing */
  while (converted && (*end == ' ' || *end == '\t')) end++;
  if (!converted || *end != '\0' || errno == ERANGE || !isfinite(d) || d < 0) {
    fprintf(stderr, "collplan profiler: %s=\"%s\" is not a number >= 0: profiler disabled for this communicator\n",
            name, v);
    return -1;
  }
  *out = d;
  return 0;
}

static int read_settings(cp_settings* s) {
  s->dir = getenv("COLLPLAN_PROFILE_DIR");
  double ring = 0;
  int bad = 0;
  bad |= parse_nonneg("COLLPLAN_PROFILE_FLUSH_S", CP_FLUSH_DEFAULT_S, &s->flushS);
  bad |= parse_nonneg("COLLPLAN_PROFILE_MAX_MB", CP_MAX_MB_DEFAULT, &s->maxMB);
  bad |= parse_nonneg("COLLPLAN_PROFILE_RING", CP_RING_DEFAULT, &ring);
  if (!bad && (ring < 1 || ring > (1u << 24) || ring != floor(ring))) {
    fprintf(stderr, "collplan profiler: COLLPLAN_PROFILE_RING=\"%s\" is not a whole number in 1..16777216\n",
            getenv("COLLPLAN_PROFILE_RING"));
    bad = 1;
  }
  s->ring = (uint32_t)ring;
  return bad ? -1 : 0;
}

__attribute__((format(printf, 3, 4))) static void plog(ncclDebugLogger_t log, ncclDebugLogLevel level,
                                                      const char* fmt, ...) {
  if (log == NULL) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  log(level, NCCL_INIT, __FILE__, __LINE__, "%s", buf);
}

/* ---- the process's communicators and the flush thread ---- */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* g_comms, g_nComms, the thread's state */
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static cp_pcomm* g_comms;
static int g_nComms, g_stop, g_running;
static int g_kick; /* a ring is half full: flush now */
static double g_flushS = CP_FLUSH_DEFAULT_S;
static pthread_t g_thread;
static pthread_mutex_t g_threadMu = PTHREAD_MUTEX_INITIALIZER; /* serializes start and join */

static void comm_free(cp_pcomm* c) {
  if (c->named) cp_names_drop(c->commId);
  if (c->fd >= 0) close(c->fd);
  pthread_mutex_destroy(&c->poolMu);
  pthread_mutex_destroy(&c->ringMu);
  pthread_mutex_destroy(&c->flushMu);
  free(c->pool);
  free(c->ring);
  free(c->spare);
  free(c);
}

static void comm_unref(cp_pcomm* c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) comm_free(c);
}

/* ---- JSON output ---- */
typedef struct {
  char* p;
  size_t len, cap;
} sbuf;

static void sb_grow(sbuf* b, size_t need) {
  if (b->p == NULL) return;
  if (b->len + need + 1 <= b->cap) return;
  size_t cap = b->cap * 2;
  while (cap < b->len + need + 1) cap *= 2;
  char* q = realloc(b->p, cap);
  if (q == NULL) {
    free(b->p);
    b->p = NULL;
    return;
  }
  b->p = q;
  b->cap = cap;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf* b, const char* fmt, ...) {
  if (b->p == NULL) return;
  for (int tries = 0; tries < 2; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    sb_grow(b, (size_t)n);
    if (b->p == NULL) return;
  }
}

static void sb_str(sbuf* b, const char* s) {
  sb_printf(b, "\"");
  for (const unsigned char* q = (const unsigned char*)s; *q; q++) {
    if (*q == '"' || *q == '\\') sb_printf(b, "\\%c", *q);
    else if (*q < 0x20 || *q >= 0x7f) sb_printf(b, "\\u%04x", *q); /* bytes kept, never invalid UTF-8 */
    else sb_printf(b, "%c", *q);
  }
  sb_printf(b, "\"");
}

static int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Appends one line if it fits under the cap (the final line may use the reserve). */
static int append_line(cp_pcomm* c, sbuf* line, int final) {
  if (line->p == NULL) return -1;
  uint64_t limit = final ? c->capBytes + CP_END_RESERVE : c->capBytes;
  if (!final && c->capped) return 1; /* past the cap, nothing more: the file stays a prefix */
  if (c->written + line->len > limit) {
    if (!final) c->capped = 1;
    return 1;
  }
  if (c->fd < 0 || write_all(c->fd, line->p, line->len) != 0) return -1;
  c->written += line->len;
  return 0;
}

static void format_rec(sbuf* b, const cp_rec* r) {
  b->len = 0;
  sb_printf(b, "{\"type\":\"coll\",\"seq\":%llu,\"coll\":", (unsigned long long)r->seq);
  sb_str(b, r->func);
  sb_printf(b, ",\"algo\":");
  sb_str(b, r->algo);
  sb_printf(b, ",\"proto\":");
  sb_str(b, r->proto);
  sb_printf(b, ",\"nChannels\":%u,\"count\":%llu,\"datatype\":", r->nChannels, (unsigned long long)r->count);
  sb_str(b, r->dtype);
  sb_printf(b, ",\"bytes\":%llu,\"numPipeOps\":", (unsigned long long)r->bytes);
  if (r->numPipeOps < 0) sb_printf(b, "null");
  else sb_printf(b, "%d", r->numPipeOps);
  sb_printf(b, ",\"kernelChannels\":%u,", r->nKernelCh);
  if (r->nKernelCh > 0 && r->stop >= r->start)
    sb_printf(b, "\"startNs\":%llu,\"ns\":%llu}\n", (unsigned long long)r->start,
              (unsigned long long)(r->stop - r->start));
  else sb_printf(b, "\"startNs\":null,\"ns\":null}\n");
}

/* Moves the ring's records to the file. Takes ringMu only for the swap. */
static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void comm_flush(cp_pcomm* c, int final) {
  pthread_mutex_lock(&c->flushMu);
  pthread_mutex_lock(&c->ringMu);
  cp_rec* recs = c->ring;
  uint32_t n = c->ringLen;
  c->ring = c->spare;
  c->ringLen = 0;
  c->spare = recs;
  if (!final && c->testIoDelayMs > 0 && c->testHoldRing) sleep_ms(c->testIoDelayMs);
  pthread_mutex_unlock(&c->ringMu);
  if (!final && c->testIoDelayMs > 0 && !c->testHoldRing) sleep_ms(c->testIoDelayMs);

  /* Lines are batched into writes of about 64 KiB (one syscall per line would cost more than the
   * formatting). A batch that fails to write counts its records as io drops. */
  sbuf line = {malloc(512), 0, 512};
  sbuf out = {malloc(CP_WRITE_BATCH + 1024), 0, CP_WRITE_BATCH + 1024};
  uint64_t batch = 0;
  for (uint32_t i = 0; i <= n; i++) {
    if (i < n) {
      format_rec(&line, &recs[i]);
      if (line.p == NULL || out.p == NULL) {
        atomic_fetch_add(&c->dropIo, 1);
        continue;
      }
      if (c->capped || c->written + line.len > c->capBytes) {
        c->capped = 1; /* past the cap, nothing more: the file stays a prefix */
        atomic_fetch_add(&c->dropCap, 1);
        continue;
      }
      sb_grow(&out, line.len);
      if (out.p == NULL) { /* out of memory: the batch so far is lost too */
        c->written -= out.len;
        out.len = 0;
        atomic_fetch_add(&c->dropIo, 1 + batch);
        batch = 0;
        continue;
      }
      memcpy(out.p + out.len, line.p, line.len);
      out.len += line.len;
      c->written += line.len;
      batch++;
    }
    if (out.p != NULL && out.len > 0 && (out.len >= CP_WRITE_BATCH || i == n)) {
      if (c->fd >= 0 && write_all(c->fd, out.p, out.len) == 0) {
        c->records += batch;
      } else {
        c->written -= out.len;
        atomic_fetch_add(&c->dropIo, batch);
      }
      out.len = 0;
      batch = 0;
    }
  }
  free(out.p);
  if (final) {
    line.len = 0;
    sb_printf(&line,
              "{\"type\":\"end\",\"records\":%llu,\"dropped\":{\"ringFull\":%llu,\"poolFull\":%llu,\"cap\":%llu,"
              "\"io\":%llu,\"unfinished\":%llu}}\n",
              (unsigned long long)c->records, (unsigned long long)atomic_load(&c->dropRing),
              (unsigned long long)atomic_load(&c->dropPool), (unsigned long long)atomic_load(&c->dropCap),
              (unsigned long long)atomic_load(&c->dropIo), (unsigned long long)atomic_load(&c->unfinished));
    if (append_line(c, &line, 1) != 0)
      plog(c->log, NCCL_LOG_WARN, "collplan profiler: cannot write the final line of %s", c->path);
  }
  free(line.p);
  pthread_mutex_unlock(&c->flushMu);
}

static void* flush_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (!g_stop) {
    if (g_kick) {
      /* a ring filled while the last round ran: no wait */
    } else if (g_flushS > 0) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      double whole = floor(g_flushS);
      ts.tv_sec += (time_t)whole;
      ts.tv_nsec += (long)((g_flushS - whole) * 1e9);
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&g_cond, &g_mu, &ts);
    } else {
      pthread_cond_wait(&g_cond, &g_mu); /* 0: no period, only half-full rings and finalize */
    }
    if (g_stop) break;
    g_kick = 0;
    /* Take a reference on every communicator, then flush them without g_mu. */
    int n = 0;
    for (cp_pcomm* c = g_comms; c != NULL; c = c->next) n++;
    cp_pcomm** list = n ? malloc((size_t)n * sizeof *list) : NULL;
    int k = 0;
    for (cp_pcomm* c = g_comms; c != NULL && list != NULL; c = c->next) {
      atomic_fetch_add(&c->refs, 1);
      list[k++] = c;
    }
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < k; i++) {
      comm_flush(list[i], 0);
      comm_unref(list[i]);
    }
    free(list);
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

/* ---- events ---- */
static cp_pev* ev_alloc(cp_pcomm* c, int kind) {
  pthread_mutex_lock(&c->poolMu);
  cp_pev* e = c->freeList;
  if (e != NULL) c->freeList = e->next;
  pthread_mutex_unlock(&c->poolMu);
  if (e == NULL) {
    atomic_fetch_add(&c->dropPool, 1);
    return NULL;
  }
  atomic_store(&e->kind, kind);
  e->next = NULL;
  return e;
}

static void ev_free(cp_pev* e) {
  cp_pcomm* c = e->comm;
  atomic_store(&e->kind, EV_FREE);
  pthread_mutex_lock(&c->poolMu);
  e->next = c->freeList;
  c->freeList = e;
  pthread_mutex_unlock(&c->poolMu);
}

/* A handle NCCL gives back is ours only if it points at a live event of that kind in c's pool. */
static cp_pev* as_event(cp_pcomm* c, void* h, int kind) {
  if (h == NULL || c == NULL) return NULL;
  uintptr_t p = (uintptr_t)h, lo = (uintptr_t)c->pool, hi = (uintptr_t)(c->pool + CP_POOL_EVENTS);
  if (p < lo || p >= hi || (p - lo) % sizeof(cp_pev) != 0) return NULL;
  cp_pev* e = h;
  return atomic_load(&e->kind) == kind ? e : NULL;
}

static void group_unref(cp_pev* g) {
  if (atomic_fetch_sub(&g->refs, 1) == 1) ev_free(g);
}

static void ring_push(cp_pcomm* c, const cp_rec* r) {
  pthread_mutex_lock(&c->ringMu);
  int full = c->ringLen >= c->ringCap;
  if (!full) c->ring[c->ringLen++] = *r;
  int half = c->ringLen == c->ringCap / 2 + 1;
  pthread_mutex_unlock(&c->ringMu);
  if (full) atomic_fetch_add(&c->dropRing, 1);
  /* Half full: wake the flush thread early. g_mu is held by others only for list updates, never
   * across I/O, and this happens once per half ring. */
  if (half) {
    pthread_mutex_lock(&g_mu);
    g_kick = 1;
    pthread_cond_signal(&g_cond);
    pthread_mutex_unlock(&g_mu);
  }
}

/* The last reference to a collective: finish its record, hand it to the ring, free the event. */
static void coll_unref(cp_pev* e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  cp_rec* r = &e->coll.rec;
  r->nKernelCh = (uint16_t)atomic_load(&e->coll.stamps);
  r->start = atomic_load(&e->coll.minStart);
  r->stop = atomic_load(&e->coll.maxStop);
  cp_pev* g = e->coll.group;
  r->numPipeOps = g != NULL ? atomic_load(&g->group.nColl) : -1;
  ring_push(e->comm, r);
  if (g != NULL) group_unref(g);
  ev_free(e);
}

static const char* const kFuncs[NCCL_NUM_FUNCTIONS] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                                       "AllReduce"};

static int func_index(const char* f) {
  for (int i = 0; i < NCCL_NUM_FUNCTIONS; i++)
    if (f != NULL && strcmp(f, kFuncs[i]) == 0) return i;
  return NCCL_NUM_FUNCTIONS;
}

/* Bytes per element of NCCL's datatype names (ncclDatatypeToString), 0 if unknown. */
static uint64_t dtype_size(const char* d) {
  static const struct {
    const char* name;
    unsigned size;
  } k[] = {{"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
           {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
           {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};
  for (size_t i = 0; d != NULL && i < sizeof k / sizeof k[0]; i++)
    if (strcmp(d, k[i].name) == 0) return k[i].size;
  return 0;
}

static void copy_str(char* dst, size_t n, const char* src) {
  if (src == NULL) src = "";
  size_t i = 0;
  for (; i + 1 < n && src[i]; i++) dst[i] = src[i];
  dst[i] = '\0';
}

static void atomic_min_u64(_Atomic uint64_t* a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v < cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static void atomic_max_u64(_Atomic uint64_t* a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* The fields both descriptor versions share, at the same offsets (checked in the ABI header). */
static ncclResult_t start_event(void* context, void** eHandle, uint64_t type, void* parentObj,
                                const ncclProfilerEventDescr_v5_t* d) {
  if (eHandle == NULL) return ncclSuccess;
  *eHandle = NULL;
  cp_pcomm* c = context;
  if (c == NULL) return ncclSuccess;
  if (type == ncclProfileGroup) {
    cp_pev* g = ev_alloc(c, EV_GROUP);
    if (g == NULL) return ncclSuccess;
    atomic_store(&g->refs, 1);
    atomic_store(&g->group.nColl, 0);
    *eHandle = g;
  } else if (type == ncclProfileColl) {
    cp_pev* e = ev_alloc(c, EV_COLL);
    if (e == NULL) return ncclSuccess;
    cp_rec* r = &e->coll.rec;
    memset(r, 0, sizeof *r);
    r->seq = d->coll.seqNumber;
    r->count = d->coll.count;
    r->nChannels = d->coll.nChannels;
    copy_str(r->func, sizeof r->func, d->coll.func);
    copy_str(r->algo, sizeof r->algo, d->coll.algo);
    copy_str(r->proto, sizeof r->proto, d->coll.proto);
    copy_str(r->dtype, sizeof r->dtype, d->coll.datatype);
    e->coll.funcIdx = func_index(d->coll.func);
    /* NCCL's model count: count x dtype size, x nRanks for AllGather and ReduceScatter. */
    uint64_t bytes = (uint64_t)d->coll.count * dtype_size(d->coll.datatype);
    if (e->coll.funcIdx == ncclFuncAllGather || e->coll.funcIdx == ncclFuncReduceScatter)
      bytes *= (uint64_t)(c->nRanks > 0 ? c->nRanks : 1);
    r->bytes = bytes;
    atomic_store(&e->coll.minStart, UINT64_MAX);
    atomic_store(&e->coll.maxStop, 0);
    atomic_store(&e->coll.stamps, 0);
    e->coll.group = as_event(c, d->coll.parentGroup, EV_GROUP);
    if (e->coll.group == NULL) e->coll.group = as_event(c, parentObj, EV_GROUP);
    if (e->coll.group != NULL) {
      atomic_fetch_add(&e->coll.group->refs, 1);
      atomic_fetch_add(&e->coll.group->group.nColl, 1);
    }
    /* Its own stop, and one per kernel channel NCCL will report. */
    atomic_store(&e->refs, 1 + (int)d->coll.nChannels);
    *eHandle = e;
  } else if (type == ncclProfileKernelCh) {
    cp_pev* coll = as_event(c, parentObj, EV_COLL);
    if (coll == NULL) return ncclSuccess; /* its collective was dropped (counted as poolFull) */
    cp_pev* k = ev_alloc(c, EV_KCH);
    if (k == NULL) {
      coll_unref(coll); /* that channel will never report: do not wait for it */
      return ncclSuccess;
    }
    atomic_store(&k->refs, 1);
    k->kch.coll = coll;
    k->kch.start = d->kernelCh.pTimer;
    k->kch.stop = 0;
    k->kch.stopped = 0;
    *eHandle = k;
  }
  return ncclSuccess; /* other types: not activated, no handle */
}

static ncclResult_t start_event_v5(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* d) {
  if (d == NULL) {
    if (eHandle != NULL) *eHandle = NULL;
    return ncclSuccess;
  }
  return start_event(context, eHandle, d->type, d->parentObj, d);
}

static ncclResult_t start_event_v6(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* d) {
  if (d == NULL) {
    if (eHandle != NULL) *eHandle = NULL;
    return ncclSuccess;
  }
  /* Coll and KernelCh sit at the same offsets in both descriptors and both are 112 bytes (checked
   * in the ABI header): a copy reads them as v5 without reading one struct type through another. */
  ncclProfilerEventDescr_v5_t v5;
  _Static_assert(sizeof v5 == sizeof *d, "v5 and v6 descriptors have one size");
  memcpy(&v5, d, sizeof v5);
  return start_event(context, eHandle, v5.type, v5.parentObj, &v5);
}

static ncclResult_t stop_event(void* eHandle) {
  cp_pev* e = eHandle;
  if (e == NULL) return ncclSuccess;
  switch (atomic_load(&e->kind)) {
    case EV_GROUP: group_unref(e); break;
    case EV_COLL: coll_unref(e); break;
    case EV_KCH: {
      cp_pev* coll = e->kch.coll;
      if (e->kch.stopped) {
        atomic_min_u64(&coll->coll.minStart, e->kch.start);
        atomic_max_u64(&coll->coll.maxStop, e->kch.stop);
        atomic_fetch_add(&coll->coll.stamps, 1);
      }
      ev_free(e);
      coll_unref(coll);
      break;
    }
    default: break;
  }
  return ncclSuccess;
}

static ncclResult_t record_state(void* eHandle, ncclProfilerEventState_v5_t state,
                                 ncclProfilerEventStateArgs_v5_t* args) {
  cp_pev* e = eHandle;
  if (e == NULL || atomic_load(&e->kind) != EV_KCH || state != ncclProfilerKernelChStop || args == NULL) return ncclSuccess;
  e->kch.stop = args->kernelCh.pTimer;
  e->kch.stopped = 1;
  return ncclSuccess;
}

static ncclResult_t record_state_v6(void* eHandle, ncclProfilerEventState_v6_t state,
                                    ncclProfilerEventStateArgs_v6_t* args) {
  return record_state(eHandle, state, args);
}

/* ---- init / finalize ---- */
static ncclResult_t prof_init(int version, void** context, uint64_t commId, int* eActivationMask,
                              const char* commName, int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  if (context == NULL) return ncclInvalidArgument;
  *context = NULL;
  cp_settings s;
  if (read_settings(&s) != 0) return ncclInvalidUsage; /* the line on stderr names the variable */
  /* The tuner's named-communicator rules need the name (names.h): recorded whether or not this
   * profiler records anything. Without a dump directory there is no context and no finalize to
   * drop it: the entry lives until the library is unloaded (the map is capped). */
  int named = 0;
  if (commName != NULL) {
    named = cp_names_put(commId, commName) == 0;
    if (!named)
      plog(logfn, NCCL_LOG_WARN,
           "collplan profiler: comm %016llx: the commName map is full (%u communicators): the tuner's named rules "
           "will not see \"%s\"",
           (unsigned long long)commId, CP_NAMES_MAX, commName);
  }
  if (s.dir == NULL || *s.dir == '\0') {
    plog(logfn, NCCL_LOG_INFO, "collplan profiler: COLLPLAN_PROFILE_DIR is not set: recording nothing");
    if (eActivationMask != NULL) *eActivationMask = 0;
    return ncclSuccess;
  }
  cp_pcomm* c = calloc(1, sizeof *c);
  if (c == NULL) {
    if (named) cp_names_drop(commId);
    return ncclSystemError;
  }
  c->fd = -1;
  pthread_mutex_init(&c->poolMu, NULL);
  pthread_mutex_init(&c->ringMu, NULL);
  pthread_mutex_init(&c->flushMu, NULL);
  c->version = version;
  c->commId = commId;
  c->named = named;
  c->nNodes = nNodes;
  c->nRanks = nranks;
  c->rank = rank;
  c->log = logfn;
  if (commName != NULL) {
    copy_str(c->commName, sizeof c->commName, commName);
    c->hasName = 1;
  }
  c->ringCap = s.ring;
  const char* delay = getenv("COLLPLAN_PROFILE_TEST_IO_DELAY_MS");
  c->testIoDelayMs = delay != NULL ? atol(delay) : 0;
  c->testHoldRing = getenv("COLLPLAN_PROFILE_TEST_HOLD_RING") != NULL;
  c->capBytes = (uint64_t)(s.maxMB * 1048576.0);
  c->capBytes = c->capBytes > CP_END_RESERVE ? c->capBytes - CP_END_RESERVE : 0;
  c->pool = calloc(CP_POOL_EVENTS, sizeof *c->pool);
  c->ring = calloc(c->ringCap, sizeof *c->ring);
  c->spare = calloc(c->ringCap, sizeof *c->spare);
  if (c->pool == NULL || c->ring == NULL || c->spare == NULL) {
    comm_free(c);
    return ncclSystemError;
  }
  for (unsigned i = 0; i < CP_POOL_EVENTS; i++) {
    c->pool[i].comm = c;
    c->pool[i].next = i + 1 < CP_POOL_EVENTS ? &c->pool[i + 1] : NULL;
  }
  c->freeList = &c->pool[0];

  char host[256] = "unknown";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = '\0';
  for (char* h = host; *h; h++)
    if (*h == '/') *h = '_';
  snprintf(c->path, sizeof c->path, "%s/%s-%ld-%016llx.jsonl", s.dir, host, (long)getpid(),
           (unsigned long long)commId);
  c->fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (c->fd < 0) {
    int err = errno;
    fprintf(stderr, "collplan profiler: cannot create %s (COLLPLAN_PROFILE_DIR): %s\n", c->path, strerror(err));
    comm_free(c);
    return ncclSystemError;
  }
  sbuf line = {malloc(512), 0, 512};
  sb_printf(&line, "{\"type\":\"header\",\"schema\":%d,\"profiler\":%d,\"host\":", CP_PROFILE_SCHEMA, version);
  sb_str(&line, host);
  sb_printf(&line, ",\"pid\":%ld,\"commId\":\"%016llx\",\"commName\":", (long)getpid(), (unsigned long long)commId);
  if (c->hasName) sb_str(&line, c->commName);
  else sb_printf(&line, "null");
  sb_printf(&line, ",\"nNodes\":%d,\"nRanks\":%d,\"rank\":%d,\"maxBytes\":%llu}\n", nNodes, nranks, rank,
            (unsigned long long)(c->capBytes + CP_END_RESERVE));
  int rc = append_line(c, &line, 1);
  free(line.p);
  if (rc != 0) {
    fprintf(stderr, "collplan profiler: cannot write the header of %s\n", c->path);
    comm_free(c);
    return ncclSystemError;
  }
  atomic_store(&c->refs, 1);

  pthread_mutex_lock(&g_threadMu);
  pthread_mutex_lock(&g_mu);
  c->next = g_comms;
  g_comms = c;
  g_nComms++;
  g_flushS = s.flushS;
  int start = !g_running;
  if (start) {
    g_stop = 0;
    g_running = 1;
  }
  pthread_mutex_unlock(&g_mu);
  if (start && pthread_create(&g_thread, NULL, flush_main, NULL) != 0) {
    pthread_mutex_lock(&g_mu);
    g_running = 0;
    pthread_mutex_unlock(&g_mu);
    plog(logfn, NCCL_LOG_WARN, "collplan profiler: no flush thread: dumps are written at finalize only");
  }
  pthread_mutex_unlock(&g_threadMu);

  if (eActivationMask != NULL) *eActivationMask = ncclProfileColl | ncclProfileKernelCh;
  *context = c;
  plog(logfn, NCCL_LOG_INFO, "collplan profiler (v%d): comm %016llx rank %d of %d: Coll and KernelCh events to %s",
       version, (unsigned long long)commId, rank, nranks, c->path);
  return ncclSuccess;
}

static ncclResult_t prof_init_v5(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                                 int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return prof_init(5, context, commId, eActivationMask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t prof_init_v6(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                                 int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return prof_init(6, context, commId, eActivationMask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t prof_finalize(void* context) {
  cp_pcomm* c = context;
  if (c == NULL) return ncclSuccess;
  pthread_mutex_lock(&g_threadMu);
  pthread_mutex_lock(&g_mu);
  for (cp_pcomm** pp = &g_comms; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  }
  int last = --g_nComms == 0;
  int join = last && g_running;
  if (join) {
    g_stop = 1;
    g_running = 0;
    pthread_cond_broadcast(&g_cond);
  }
  pthread_mutex_unlock(&g_mu);
  if (join) pthread_join(g_thread, NULL);
  pthread_mutex_unlock(&g_threadMu);

  /* Collectives still waiting for a channel NCCL never reported: counted, not written. */
  unsigned long long unfinished = 0;
  for (unsigned i = 0; i < CP_POOL_EVENTS; i++) unfinished += atomic_load(&c->pool[i].kind) == EV_COLL;
  atomic_store(&c->unfinished, unfinished);
  comm_flush(c, 1);
  comm_unref(c); /* a flusher that still holds it frees it */
  return ncclSuccess;
}

CP_EXPORT const ncclProfiler_v6_t ncclProfiler_v6 = {
    .name = "collplan",
    .init = prof_init_v6,
    .startEvent = start_event_v6,
    .stopEvent = stop_event,
    .recordEventState = record_state_v6,
    .finalize = prof_finalize,
};

CP_EXPORT const ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "collplan",
    .init = prof_init_v5,
    .startEvent = start_event_v5,
    .stopEvent = stop_event,
    .recordEventState = record_state,
    .finalize = prof_finalize,
};
