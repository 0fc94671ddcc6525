/*
 * libnccl-tuner-collplan.so: the NCCL tuner plugin (ABI v2..v6, v7 with TUNER_V7=1) that applies a compiled collplan
 * table (docs/tuner-table.md). Pure C: no Go runtime ever runs inside NCCL's process.
 *
 * - init reads the table named by COLLPLAN_TUNER_TABLE (else NCCL_TUNER_CONFIG_FILE) once per
 *   process and shares it between communicators through a refcounted cache (the only mutable
 *   global state, under a mutex), picks the block of the communicator's exact (nNodes, nRanks), and
 *   never fails because of the table: any problem with it is logged and the context passes through
 *   (NCCL's table untouched). Init fails (ncclInvalidUsage) only on a bad COLLPLAN_EXPLORE.
 * - getCollInfo forces the first ranked plan whose cell NCCL did not mark IGNORE by setting it to
 *   0.0; it always returns ncclSuccess and logs per decision only under NCCL_DEBUG=TRACE.
 * - COLLPLAN_EXPLORE=FRACTION (0 < FRACTION <= 0.05; off when unset or 0) sends every P-th call of
 *   a (class, interval) band, P = round(1 / FRACTION), to a runner-up legal plan, chosen by that
 *   band's call counter alone (explore_step below), so that every rank decides alike.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cptable.h"
#include "names.h"
#include "nccl_tuner_abi.h"

#define CP_EXPORT __attribute__((visibility("default")))
#define CP_NAME "collplan"

_Static_assert(sizeof(ncclTunerConstants_v5_t) == CP_NUM_CONSTANTS * sizeof(double), "constants block size");

static const char* const kCollNames[CP_NUM_COLLS] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                                     "AllReduce"};
static const char* const kAlgoNames[CP_NUM_ALGOS] = {"Tree", "Ring", "CollNetDirect", "CollNetChain",
                                                     "NVLS", "NVLSTree", "PAT"};
static const char* const kProtoNames[CP_NUM_PROTOS] = {"LL", "LL128", "Simple"};

/* ---------------------------------------------------------------------------------------------
 * Shared table cache: one entry per file identity (device, inode, size, mtime), refcounted by the
 * contexts that use it. A file replaced on disk gets a new entry; the old one lives on until its
 * last communicator is finalized.
 */
typedef struct cp_entry {
  struct cp_entry* next;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  unsigned refs;
  cp_table* table;
} cp_entry;

static pthread_mutex_t g_cacheMu = PTHREAD_MUTEX_INITIALIZER;
static cp_entry* g_cache; /* guarded by g_cacheMu */

/* Returns a referenced entry, or NULL with err set. *loaded tells whether this call read the file. */
static cp_entry* cache_acquire(const char* path, int* loaded, char* err, size_t errLen) {
  *loaded = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    snprintf(err, errLen, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, errLen, "cannot stat: %s", strerror(errno));
    close(fd);
    return NULL;
  }
  cp_entry* e = NULL;
  pthread_mutex_lock(&g_cacheMu);
  for (cp_entry* it = g_cache; it != NULL; it = it->next) {
    if (it->dev == st.st_dev && it->ino == st.st_ino && it->size == st.st_size &&
        it->mtime.tv_sec == st.st_mtim.tv_sec && it->mtime.tv_nsec == st.st_mtim.tv_nsec) {
      e = it;
      break;
    }
  }
  if (e != NULL) {
    e->refs++;
  } else {
    /* Read under the lock: concurrent inits of the same file wait for one load. */
    cp_table* t = cp_table_read_fd(fd, err, errLen);
    if (t != NULL) {
      e = calloc(1, sizeof *e);
      if (e == NULL) {
        snprintf(err, errLen, "out of memory");
        cp_table_free(t);
      } else {
        e->dev = st.st_dev;
        e->ino = st.st_ino;
        e->size = st.st_size;
        e->mtime = st.st_mtim;
        e->refs = 1;
        e->table = t;
        e->next = g_cache;
        g_cache = e;
        *loaded = 1;
      }
    }
  }
  pthread_mutex_unlock(&g_cacheMu);
  close(fd);
  return e;
}

static void cache_release(cp_entry* e) {
  if (e == NULL) return;
  cp_table* dead = NULL;
  pthread_mutex_lock(&g_cacheMu);
  if (--e->refs == 0) {
    for (cp_entry** pp = &g_cache; *pp != NULL; pp = &(*pp)->next) {
      if (*pp == e) {
        *pp = e->next;
        break;
      }
    }
    dead = e->table;
  } else {
    e = NULL;
  }
  pthread_mutex_unlock(&g_cacheMu);
  if (e != NULL) {
    cp_table_free(dead);
    free(e);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Per-communicator context.
 */
enum {
  ONCE_PIPEOPS = 1u << 0,
  ONCE_COLL = 1u << 1,
  ONCE_NO_TABLE_PTR = 1u << 2,
  ONCE_CHUNK = 1u << 3,
};

typedef struct {
  ncclDebugLogger_t log; /* may be NULL: no logging */
  int trace;             /* NCCL_DEBUG=TRACE at init */
  int abi;
  uint64_t commId;
  size_t nRanks, nNodes;
  cp_entry* entry;        /* referenced cache entry (kept by a pass-through context too), or NULL */
  const cp_table* table;  /* entry->table */
  const cp_block* block;  /* the matched block, NULL when passing through */
  atomic_uint once;       /* ONCE_* warnings already logged */
  /* Named-communicator rules (docs/tuner-rules.md): set at init when the table has some and the ABI
   * gives a commId; the first getCollInfo or getChunkSize resolves the name once (names.h) and
   * clears it, and the block chosen then is kept for the communicator's lifetime. */
  int pendingName;
  char name[CP_NAME_BYTES];
  /* Exploration (COLLPLAN_EXPLORE), allocated at init on a matched block only; period 0 = off.
   * The counters are plain integers, with no lock or atomic: NCCL calls getCollInfo for one
   * communicator from one thread at a time. Its user guide (Thread Safety,
   * https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/threadsafety.html) forbids
   * issuing operations to one communicator from several threads in parallel, and a group's
   * operations must all come from one thread; getCollInfo runs in topoGetAlgoInfo
   * (src/enqueue.cc) while that group's tasks are prepared, one group job per communicator at a
   * time. ncclGroupSimulateEnd takes the same path: a job that calls it must call it on every rank
   * alike, or the ranks' counters part. */
  double fraction;
  uint64_t period;
  uint64_t* bandCalls;  /* one per interval of every class of the block: getCollInfo calls seen */
  uint32_t* classBase;  /* per class of the block: index of its first interval in bandCalls */
  uint64_t* explored;   /* per class: calls sent to a runner-up */
  uint32_t nClasses;
} cp_ctx;

__attribute__((format(printf, 5, 6))) static void cp_log(ncclDebugLogger_t log, ncclDebugLogLevel level,
                                                        const char* file, int line, const char* fmt, ...) {
  if (log == NULL) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  log(level, NCCL_TUNING, file, line, "%s", buf); /* never hand our text to NCCL as a format */
}

#define LOGF(c, level, ...) cp_log((c)->log, (level), __FILE__, __LINE__, __VA_ARGS__)

/* Logs once per context (the message says so): the hot path never logs otherwise. */
#define LOG_ONCE(c, level, bit, ...)                                                                \
  do {                                                                                              \
    if ((c)->log != NULL && !(atomic_load_explicit(&(c)->once, memory_order_relaxed) & (bit)) &&    \
        !(atomic_fetch_or_explicit(&(c)->once, (bit), memory_order_relaxed) & (bit)))               \
      LOGF(c, (level), __VA_ARGS__);                                                                \
  } while (0)

static int env_is(const char* name, const char* value) {
  const char* v = getenv(name);
  return v != NULL && strcasecmp(v, value) == 0;
}

static void describe_blocks(const cp_table* t, char* buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (uint32_t b = 0; b < t->nBlocks && used + 32 < len; b++) {
    if (b == 8) {
      snprintf(buf + used, len - used, " ... (%u blocks)", t->nBlocks);
      return;
    }
    int n = snprintf(buf + used, len - used, "%s%ux%u", b ? " " : "", t->blocks[b].nNodes, t->blocks[b].nRanks);
    if (n < 0) return;
    used += (size_t)n;
  }
  if (t->nBlocks == 0) snprintf(buf, len, "none");
}

#define CP_EXPLORE_MAX 0.05

/* COLLPLAN_EXPLORE: 0 (off) when unset or empty; else a number in [0, CP_EXPLORE_MAX]. Returns -1
 * (with a stderr line and a WARN naming the variable and the limit) for anything else. */
static int explore_setting(ncclDebugLogger_t log, double* out) {
  *out = 0;
  const char* v = getenv("COLLPLAN_EXPLORE");
  if (v == NULL || *v == '\0') return 0;
  char* end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  int converted = end != NULL && end != v; /* before skipping blanks: " " converts nothing */
  while (converted && (*end == ' ' || *end == '\t')) end++;
  if (!converted || *end != '\0' || errno == ERANGE || !(d >= 0.0 && d <= CP_EXPLORE_MAX)) {
    fprintf(stderr,
            "collplan: COLLPLAN_EXPLORE=\"%s\" is not a fraction between 0 and %g (at most 5%% of the calls): the "
            "tuner's init fails\n",
            v, CP_EXPLORE_MAX);
    cp_log(log, NCCL_LOG_WARN, __FILE__, __LINE__,
           "collplan: COLLPLAN_EXPLORE=\"%s\" is not a fraction between 0 and %g: init fails", v, CP_EXPLORE_MAX);
    return -1;
  }
  *out = d;
  return 0;
}

/* Allocates the exploration counters of c's matched block: one uint64 per interval of each class. */
static int explore_alloc(cp_ctx* c) {
  const cp_block* b = c->block;
  uint32_t n = CP_NUM_COLLS * (b->p1 - b->p0 + 1);
  c->classBase = calloc(n, sizeof *c->classBase);
  c->explored = calloc(n, sizeof *c->explored);
  if (c->classBase == NULL || c->explored == NULL) return -1;
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    c->classBase[i] = (uint32_t)total;
    total += b->classes[i].n;
  }
  if (total > UINT32_MAX) return -1;
  c->bandCalls = calloc((size_t)total, sizeof *c->bandCalls);
  if (c->bandCalls == NULL) return -1;
  c->nClasses = n;
  return 0;
}

static void ctx_free(cp_ctx* c) {
  cache_release(c->entry);
  free(c->bandCalls);
  free(c->classBase);
  free(c->explored);
  free(c);
}

static cp_ctx* ctx_init_table(int abi, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                              const ncclNvlDomainInfo_v5_t* nvl, ncclTunerConstants_v5_t* constants);

/* The tuner's init: *out is the context (NULL passes through), or NULL with an error returned.
 * NCCL checks the result (NCCLCHECK around comm->tuner->init in src/init.cc's initTransportsRank
 * at 2.28; ncclTuningInit on master), so an error fails the communicator's init. */
static ncclResult_t ctx_init(int abi, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                             const ncclNvlDomainInfo_v5_t* nvl, ncclTunerConstants_v5_t* constants, void** out) {
  *out = NULL;
  double fraction;
  if (explore_setting(log, &fraction) != 0) return ncclInvalidUsage;
  cp_ctx* c = ctx_init_table(abi, commId, nRanks, nNodes, log, nvl, constants);
  if (c == NULL && fraction != 0.0) return ncclSystemError; /* out of memory (logged): see below */
  if (c == NULL || c->block == NULL || fraction == 0.0) {
    *out = c;
    return ncclSuccess;
  }
  double p = 1.0 / fraction + 0.5; /* round half up: 1 / fraction >= 20 */
  if (!(p < 4294967296.0)) {        /* P >= 2^32: not one exploration in 4 billion calls of a band */
    LOGF(c, NCCL_LOG_INFO, "collplan: COLLPLAN_EXPLORE=%g gives a period of 2^32 calls or more: nothing to explore",
         fraction);
    *out = c;
    return ncclSuccess;
  }
  /* Every rank must explore alike: a rank that could not count would pick differently from the
   * others, so with exploration on a failed allocation fails init rather than passing through. */
  if (explore_alloc(c) != 0) {
    LOGF(c, NCCL_LOG_WARN, "collplan: out of memory for the COLLPLAN_EXPLORE counters: init fails");
    ctx_free(c);
    return ncclSystemError;
  }
  c->fraction = fraction;
  c->period = (uint64_t)p;
  LOGF(c, NCCL_LOG_INFO,
       "collplan: COLLPLAN_EXPLORE=%g: call c of each (collective, numPipeOps, size interval) with c %% %llu == %llu "
       "takes a runner-up legal plan",
       fraction, (unsigned long long)c->period, (unsigned long long)(c->period - 1));
  *out = c;
  return ncclSuccess;
}

static cp_ctx* ctx_init_table(int abi, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                              const ncclNvlDomainInfo_v5_t* nvl, ncclTunerConstants_v5_t* constants) {
  cp_ctx* c = calloc(1, sizeof *c);
  if (c == NULL) {
    cp_log(log, NCCL_LOG_WARN, __FILE__, __LINE__, "collplan: out of memory at init: passing through");
    return NULL; /* every entry point treats a NULL context as pass-through */
  }
  c->log = log;
  c->abi = abi;
  c->commId = commId;
  c->nRanks = nRanks;
  c->nNodes = nNodes;
  c->trace = env_is("NCCL_DEBUG", "TRACE");
  atomic_init(&c->once, 0u);

  static const char* const filters[] = {"NCCL_ALGO", "NCCL_PROTO"};
  for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
    const char* v = getenv(filters[i]);
    if (v != NULL && *v)
      LOGF(c, NCCL_LOG_INFO,
           "collplan: %s=%s is set: NCCL applies it first, cells it disables stay IGNORE and collplan takes its "
           "next ranked plan",
           filters[i], v);
  }

  const char* path = getenv("COLLPLAN_TUNER_TABLE");
  const char* var = "COLLPLAN_TUNER_TABLE";
  if (path == NULL || *path == '\0') {
    path = getenv("NCCL_TUNER_CONFIG_FILE");
    var = "NCCL_TUNER_CONFIG_FILE";
  }
  if (path == NULL || *path == '\0') {
    LOGF(c, NCCL_LOG_INFO,
         "collplan: no table (set COLLPLAN_TUNER_TABLE to a `planner compile` output): passing through, NCCL "
         "tunes alone (ABI v%d)",
         abi);
    return c;
  }

  char err[512];
  int loaded = 0;
  cp_entry* e = cache_acquire(path, &loaded, err, sizeof err);
  if (e == NULL) {
    LOGF(c, NCCL_LOG_WARN, "collplan: table %s (from %s) refused: %s; passing through, NCCL tunes alone", path, var,
         err);
    return c;
  }
  const cp_table* t = e->table;
  if (loaded)
    LOGF(c, NCCL_LOG_INFO,
         "collplan: loaded table %s: node %s, %u blocks, K %u, %zu bytes, checksum %016llx, priced by NCCL %s's "
         "model%s",
         path, t->node, t->nBlocks, t->k, t->size, (unsigned long long)t->checksum,
         t->release[0] ? t->release : "2.30.7 (default)", t->hasConstants ? ", with model constants" : "");

  const cp_block* b = cp_table_find_block(t, nNodes, nRanks);
  if (b == NULL) {
    char blocks[256];
    describe_blocks(t, blocks, sizeof blocks);
    LOGF(c, NCCL_LOG_INFO, /* routine for sub-communicators outside the compiled grid */
         "collplan: table %s (node %s, checksum %016llx) has no block for nNodes %zu nRanks %zu (blocks nNodes x "
         "nRanks: %s); passing through",
         path, t->node, (unsigned long long)t->checksum, nNodes, nRanks, blocks);
    c->entry = e; /* keep the table cached for the process's other communicators */
    return c;
  }
  unsigned blockIdx = (unsigned)(b - t->blocks);

  if (nvl != NULL) {
    int match = (uint64_t)(int64_t)nvl->nNvlDomains == b->nNvlDomains &&
                (uint64_t)(int64_t)nvl->minRanksPerNvlDomain == b->minRanksPerNvlDomain &&
                (uint64_t)(int64_t)nvl->maxRanksPerNvlDomain == b->maxRanksPerNvlDomain;
    if (!match) {
      int strict = env_is("COLLPLAN_TUNER_STRICT", "1");
      LOGF(c, strict ? NCCL_LOG_WARN : NCCL_LOG_INFO,
           "collplan: NVL domains differ from block %u of %s: NCCL sees %d domains of %d..%d ranks, the table was "
           "compiled for %u of %u..%u%s",
           blockIdx, path, nvl->nNvlDomains, nvl->minRanksPerNvlDomain, nvl->maxRanksPerNvlDomain, b->nNvlDomains,
           b->minRanksPerNvlDomain, b->maxRanksPerNvlDomain,
           strict ? "; COLLPLAN_TUNER_STRICT=1 refuses the block: passing through" : "; using it anyway");
      if (strict) {
        c->entry = e;
        return c;
      }
    }
  } else if (env_is("COLLPLAN_TUNER_STRICT", "1")) {
    LOGF(c, NCCL_LOG_INFO, "collplan: ABI v%d gives no NVL domain info: COLLPLAN_TUNER_STRICT cannot check it", abi);
  }

  c->entry = e;
  c->table = t;
  c->block = b;
  /* NCCL (src/init.cc, initTransportsRank, 2.28+) calls init with &comm->tunerConstants between
   * ncclTopoInitTunerConstants and ncclTopoTuneModel, which uses the values as they come back, with
   * no clamp: the table reader (cptable.c) refuses any constant that is negative or not finite. */
  if (constants != NULL && t->hasConstants) {
    memcpy(constants, t->constants, sizeof *constants);
    LOGF(c, NCCL_LOG_INFO, "collplan: replaced NCCL's model constants with the table's");
  }
  if (t->nNamed != 0) {
    if (abi < 5) {
      LOGF(c, NCCL_LOG_INFO,
           "collplan: the table has %u named-communicator rules, but tuner ABI v%d gives no commId: they never "
           "match",
           t->nNamed, abi);
    } else {
      c->pendingName = 1;
      const char* prof = getenv("NCCL_PROFILER_PLUGIN");
      if (prof == NULL || *prof == '\0')
        LOGF(c, NCCL_LOG_INFO,
             "collplan: the table has %u named-communicator rules, but NCCL_PROFILER_PLUGIN is not set: only this "
             "library's profiler tells the tuner a commName, so they never match",
             t->nNamed);
    }
  }
  char comm[40] = "comm"; /* v2..v4 init gets no commId */
  if (abi >= 5) snprintf(comm, sizeof comm, "comm %#llx", (unsigned long long)commId);
  LOGF(c, NCCL_LOG_INFO,
       "collplan: %s (ABI v%d) nNodes %zu nRanks %zu uses table %s: node %s, block %u, numPipeOps %u..%u "
       "(others pass through), K %u, checksum %016llx%s",
       comm, abi, nNodes, nRanks, path, t->node, blockIdx, b->p0, b->p1, t->k, (unsigned long long)t->checksum,
       c->trace ? ", tracing every decision" : "");
  return c;
}

static ncclResult_t ctx_finalize(void* ctx) {
  cp_ctx* c = ctx;
  if (c == NULL) return ncclSuccess;
  if (c->period != 0 && c->log != NULL) {
    /* The exploration counts (the profiler's dump records what ran, not that it was explored). */
    uint64_t calls = 0, explored = 0;
    uint32_t span = c->block->p1 - c->block->p0 + 1;
    for (uint32_t i = 0; i < c->nClasses; i++) {
      uint64_t n = 0;
      for (uint32_t j = 0; j < c->block->classes[i].n; j++) {
        uint64_t st = c->bandCalls[c->classBase[i] + j];
        n += (st >> 32) * c->period + (uint32_t)st;
      }
      calls += n;
      explored += c->explored[i];
      if (n != 0)
        LOGF(c, NCCL_LOG_INFO, "collplan: explored %s numPipeOps %u: %llu of %llu calls", kCollNames[i / span],
             c->block->p0 + i % span, (unsigned long long)c->explored[i], (unsigned long long)n);
    }
    LOGF(c, NCCL_LOG_INFO, "collplan: explored %llu of %llu calls in all (COLLPLAN_EXPLORE=%g, period %llu)",
         (unsigned long long)explored, (unsigned long long)calls, c->fraction, (unsigned long long)c->period);
  }
  ctx_free(c);
  return ncclSuccess;
}

/* Resolves the communicator's name, once, at its first call: the first named entry whose pattern
 * matches the name and whose block has the communicator's shape replaces the block. A name not
 * known by then (no profiler from this library, or its init not run yet) never will be: the
 * communicator keeps its shape's block for life, so that a decision never changes inside a
 * running communicator (every rank of it sees the same order of inits and calls). */
static __attribute__((noinline)) void ctx_resolve_name(cp_ctx* c) {
  c->pendingName = 0;
  const cp_table* t = c->table;
  if (!cp_names_get(c->commId, c->name, sizeof c->name)) {
    LOGF(c, NCCL_LOG_INFO,
         "collplan: comm %#llx: commName not known at its first collective (the profiler plugin of this library "
         "not loaded, or its init not run yet): the table's named-communicator rules do not apply to it",
         (unsigned long long)c->commId);
    return;
  }
  for (uint32_t i = 0; i < t->nNamed; i++) {
    const cp_block* b = &t->blocks[t->named[i].block];
    if (b->nNodes != c->block->nNodes || b->nRanks != c->block->nRanks) continue;
    if (fnmatch(t->named[i].pattern, c->name, FNM_PATHNAME) != 0) continue;
    const cp_block* old = c->block;
    c->block = b;
    if (c->period != 0) {
      /* The counters were sized for the shape's block: no call has counted yet, so start over. */
      uint64_t* bandCalls = c->bandCalls;
      uint32_t* classBase = c->classBase;
      uint64_t* explored = c->explored;
      c->bandCalls = NULL, c->classBase = NULL, c->explored = NULL;
      if (explore_alloc(c) != 0) {
        free(c->bandCalls), free(c->classBase), free(c->explored);
        c->bandCalls = bandCalls, c->classBase = classBase, c->explored = explored;
        c->block = old;
        LOGF(c, NCCL_LOG_WARN,
             "collplan: comm %#llx \"%s\": out of memory for the exploration counters of named block %u: keeping "
             "the shape's block",
             (unsigned long long)c->commId, c->name, t->named[i].block);
        return;
      }
      free(bandCalls), free(classBase), free(explored);
    }
    LOGF(c, NCCL_LOG_INFO, "collplan: comm %#llx \"%s\" matches named rule \"%s\": block %u", (unsigned long long)c->commId,
         c->name, t->named[i].pattern, t->named[i].block);
    return;
  }
  LOGF(c, NCCL_LOG_INFO, "collplan: comm %#llx \"%s\" matches no named rule of its shape: block %u",
       (unsigned long long)c->commId, c->name, (unsigned)(c->block - t->blocks));
}

/* The class of a call, or NULL (pass through) with the reason logged as the rules say. */
static const cp_class* ctx_class(cp_ctx* c, ncclFunc_t collType, int numPipeOps) {
  if (__builtin_expect(c->pendingName, 0)) ctx_resolve_name(c);
  unsigned coll = (unsigned)collType;
  if (coll >= CP_NUM_COLLS) {
    LOG_ONCE(c, NCCL_LOG_INFO, ONCE_COLL,
             "collplan: no table for collective %d, passing it through (logged once per communicator)",
             (int)collType);
    return NULL;
  }
  const cp_class* cls = cp_block_class(c->block, coll, numPipeOps);
  if (cls == NULL) {
    LOG_ONCE(c, NCCL_LOG_INFO, ONCE_PIPEOPS,
             "collplan: numPipeOps %d outside the compiled range %u..%u: such calls pass through (logged once per "
             "communicator)",
             numPipeOps, c->block->p0, c->block->p1);
    return NULL;
  }
  return cls;
}

/* The plan slots for a call, or NULL (pass through). */
static const uint8_t* ctx_plans(cp_ctx* c, ncclFunc_t collType, size_t nBytes, int numPipeOps) {
  const cp_class* cls = ctx_class(c, collType, numPipeOps);
  return cls == NULL ? NULL : cp_class_plans(c->table, cls, (uint64_t)nBytes);
}

/* Exploration (COLLPLAN_EXPLORE), the deterministic rule. Let P = round(1 / FRACTION), c the
 * number of earlier getCollInfo calls of this communicator in the call's band (its collective,
 * numPipeOps and size interval of the table), and L[0..R-1] the interval's ranked plans that are
 * legal in NCCL's cost table for this call (inside numAlgo x numProto, cell not IGNORE), in rank
 * order. If c % P == P - 1 and R >= 2 the call takes L[1 + (c / P) % (R - 1)], else L[0] (the
 * table's pick). Nothing else (time, random numbers, thread ids) enters: every rank issues the same
 * collectives in the same order, so every rank's counters, and decisions, agree.
 *
 * A band's counter is kept as (c / P) << 32 | (c % P), so that a call needs no division (P < 2^32,
 * see ctx_init); the high half wraps after 2^32 explorations of one band, alike on every rank.
 * Returns the interval's plan slots for the caller to force the first legal one, or NULL when this
 * call explored (the cell is forced already). */
static __attribute__((noinline)) const uint8_t* explore_step(cp_ctx* c, ncclFunc_t collType, size_t nBytes,
                                                             int numPipeOps, const cp_class* cls, float* table,
                                                             int numAlgo, int numProto, int* nChannels) {
  uint32_t ci = (uint32_t)(cls - c->block->classes);
  uint32_t interval = cp_class_interval(c->table, cls, (uint64_t)nBytes);
  const uint8_t* plans = c->table->data + cls->plansOff + (size_t)interval * c->table->k * CP_PLAN_BYTES;
  uint64_t* band = &c->bandCalls[c->classBase[ci] + interval];
  uint64_t st = *band;
  if ((uint32_t)st != c->period - 1) {
    *band = st + 1;
    return plans;
  }
  uint32_t cycle = (uint32_t)(st >> 32); /* c / P */
  *band = (uint64_t)(cycle + 1u) << 32;
  unsigned legal[CP_MAX_K], r = 0;
  for (unsigned s = 0; s < c->table->k; s++) {
    cp_plan p = cp_plan_at(plans + (size_t)s * CP_PLAN_BYTES);
    if (p.algo == CP_NO_PLAN) break;
    if (p.algo >= (unsigned)numAlgo || p.proto >= (unsigned)numProto) continue;
    if (!(table[(size_t)p.algo * (size_t)numProto + p.proto] >= 0.0f)) continue; /* IGNORE */
    legal[r++] = s;
  }
  if (r < 2) return plans; /* nothing to explore: the pick (or none) */
  unsigned s = legal[1 + cycle % (r - 1)];
  c->explored[ci]++;
  cp_plan p = cp_plan_at(plans + (size_t)s * CP_PLAN_BYTES);
  table[(size_t)p.algo * (size_t)numProto + p.proto] = 0.0f;
  if (p.channels != 0 && nChannels != NULL) *nChannels = (int)p.channels;
  if (c->trace)
    LOGF(c, NCCL_LOG_TRACE,
         "collplan: %s nBytes %zu numPipeOps %d -> %s/%s (rank %u), nChannels %u, exploring (COLLPLAN_EXPLORE)",
         kCollNames[collType], nBytes, numPipeOps, kAlgoNames[p.algo], kProtoNames[p.proto], s + 1, p.channels);
  return NULL;
}

static ncclResult_t cost_table_info(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                    float** collCostTable, int numAlgo, int numProto, int* nChannels) {
  cp_ctx* c = ctx;
  if (c == NULL || c->block == NULL) return ncclSuccess;
  if (collCostTable == NULL || numAlgo <= 0 || numProto <= 0) {
    LOG_ONCE(c, NCCL_LOG_WARN, ONCE_NO_TABLE_PTR,
             "collplan: NCCL passed no cost table (numAlgo %d numProto %d): passing through (logged once per "
             "communicator)",
             numAlgo, numProto);
    return ncclSuccess;
  }
  const cp_class* cls = ctx_class(c, collType, numPipeOps);
  if (cls == NULL) {
    if (c->trace)
      LOGF(c, NCCL_LOG_TRACE, "collplan: coll %d nBytes %zu numPipeOps %d: pass through", (int)collType, nBytes,
           numPipeOps);
    return ncclSuccess;
  }
  float* table = (float*)collCostTable; /* NCCL's float[numAlgo][numProto], not row pointers */
  const uint8_t* plans;
  if (c->period == 0) {
    plans = cp_class_plans(c->table, cls, (uint64_t)nBytes);
  } else {
    plans = explore_step(c, collType, nBytes, numPipeOps, cls, table, numAlgo, numProto, nChannels);
    if (plans == NULL) return ncclSuccess; /* explored */
  }
  for (unsigned s = 0; s < c->table->k; s++) {
    cp_plan p = cp_plan_at(plans + (size_t)s * CP_PLAN_BYTES);
    if (p.algo == CP_NO_PLAN) break;
    if (p.algo >= (unsigned)numAlgo || p.proto >= (unsigned)numProto) continue;
    float* cell = &table[(size_t)p.algo * (size_t)numProto + p.proto];
    if (!(*cell >= 0.0f)) continue; /* IGNORE: -1, -1024 (fp8), any negative, NaN */
    *cell = 0.0f;
    if (p.channels != 0 && nChannels != NULL) *nChannels = (int)p.channels;
    if (c->trace)
      LOGF(c, NCCL_LOG_TRACE, "collplan: %s nBytes %zu numPipeOps %d -> %s/%s (rank %u), nChannels %u",
           kCollNames[collType], nBytes, numPipeOps, kAlgoNames[p.algo], kProtoNames[p.proto], s + 1, p.channels);
    return ncclSuccess;
  }
  if (c->trace)
    LOGF(c, NCCL_LOG_TRACE, "collplan: %s nBytes %zu numPipeOps %d: every ranked plan is IGNORE, NCCL decides",
         kCollNames[collType], nBytes, numPipeOps);
  return ncclSuccess;
}

/* ---- v6 / v5 ---- */
static ncclResult_t init_v6(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                            ncclNvlDomainInfo_v6_t* nvl, ncclTunerConstants_v6_t* constants) {
  if (ctx == NULL) return ncclSuccess;
  return ctx_init(6, commId, nRanks, nNodes, log, nvl, constants, ctx);
}

static ncclResult_t init_v5(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                            ncclNvlDomainInfo_v5_t* nvl, ncclTunerConstants_v5_t* constants) {
  if (ctx == NULL) return ncclSuccess;
  return ctx_init(5, commId, nRanks, nNodes, log, nvl, constants, ctx);
}

static ncclResult_t get_coll_info_v5(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                     float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels) {
  (void)regBuff; /* the table does not depend on it */
  return cost_table_info(ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, nChannels);
}

/* NCCL's chunk grain per protocol (LL, LL128, Simple). After getChunkSize NCCL clamps the value to
 * the buffer's maximum chunk and rounds it down to this grain (calcCollChunking in
 * src/enqueue/enqueue.cc at master 00e7331; reference nccl-costmodel.md section 10 gives the same
 * rule for v2.30.7-1's src/enqueue.cc), then divides by the chunk: a value below the grain
 * would become 0. Values at or above it are NCCL's to clamp. */
static const uint32_t kChunkGrain[CP_NUM_PROTOS] = {16, 1920, 512};

static ncclResult_t get_chunk_size_v6(void* ctx, ncclFunc_t collType, size_t nBytes, int algo, int proto,
                                      int nChannels, size_t* chunkSize) {
  (void)nChannels;
  cp_ctx* c = ctx;
  if (c == NULL || c->block == NULL || chunkSize == NULL || (unsigned)collType >= CP_NUM_COLLS) return ncclSuccess;
  if (__builtin_expect(c->pendingName, 0)) ctx_resolve_name(c);
  /* The call carries no numPipeOps: use the smallest compiled one. */
  const cp_class* cls = cp_block_class(c->block, (unsigned)collType, (int)c->block->p0);
  if (cls == NULL) return ncclSuccess;
  const uint8_t* plans = cp_class_plans(c->table, cls, (uint64_t)nBytes);
  for (unsigned s = 0; s < c->table->k; s++) {
    cp_plan p = cp_plan_at(plans + (size_t)s * CP_PLAN_BYTES);
    if (p.algo == CP_NO_PLAN) break;
    if ((int)p.algo != algo || (int)p.proto != proto) continue;
    if (p.chunk != 0 && p.chunk < kChunkGrain[p.proto]) {
      LOG_ONCE(c, NCCL_LOG_INFO, ONCE_CHUNK,
               "collplan: table chunk %u for %s/%s is below the protocol's %u-byte grain (NCCL would round it to "
               "0): keeping NCCL's chunk (logged once per communicator)",
               p.chunk, kAlgoNames[p.algo], kProtoNames[p.proto], kChunkGrain[p.proto]);
      return ncclSuccess;
    }
    if (p.chunk != 0) {
      if (c->trace)
        LOGF(c, NCCL_LOG_TRACE, "collplan: %s nBytes %zu %s/%s: chunk %zu -> %u", kCollNames[collType], nBytes,
             kAlgoNames[p.algo], kProtoNames[p.proto], *chunkSize, p.chunk);
      *chunkSize = p.chunk;
    }
    return ncclSuccess;
  }
  return ncclSuccess;
}

#ifdef COLLPLAN_TUNER_V7
/* ---- v7 (NCCL master, unreleased; built with `make shim TUNER_V7=1`) ----
 * The v7 constants hold the v5 ones plus a fifth compute-capability row (Rubin) in each of the five
 * bandwidth arrays. The table carries the v5 layout: the shared part goes through the v5 path and
 * back, and the Rubin row keeps the value NCCL passed in. */
static void constants_v7_to_v5(ncclTunerConstants_v5_t* d, const ncclTunerConstants_v7_t* s) {
  memcpy(d->baseLatencies, s->baseLatencies, sizeof d->baseLatencies);
  memcpy(d->hwLatencies, s->hwLatencies, sizeof d->hwLatencies);
  memcpy(d->llMaxBws, s->llMaxBws, sizeof d->llMaxBws); /* the first 4 rows of 5 */
  memcpy(d->perChMaxRingLL128Bws, s->perChMaxRingLL128Bws, sizeof d->perChMaxRingLL128Bws);
  memcpy(d->perChMaxTreeLL128Bws, s->perChMaxTreeLL128Bws, sizeof d->perChMaxTreeLL128Bws);
  memcpy(d->perChMaxTreeBws, s->perChMaxTreeBws, sizeof d->perChMaxTreeBws);
  memcpy(d->perChMaxNVLSTreeBws, s->perChMaxNVLSTreeBws, sizeof d->perChMaxNVLSTreeBws);
}

static void constants_v5_to_v7(ncclTunerConstants_v7_t* d, const ncclTunerConstants_v5_t* s) {
  memcpy(d->baseLatencies, s->baseLatencies, sizeof s->baseLatencies);
  memcpy(d->hwLatencies, s->hwLatencies, sizeof s->hwLatencies);
  memcpy(d->llMaxBws, s->llMaxBws, sizeof s->llMaxBws);
  memcpy(d->perChMaxRingLL128Bws, s->perChMaxRingLL128Bws, sizeof s->perChMaxRingLL128Bws);
  memcpy(d->perChMaxTreeLL128Bws, s->perChMaxTreeLL128Bws, sizeof s->perChMaxTreeLL128Bws);
  memcpy(d->perChMaxTreeBws, s->perChMaxTreeBws, sizeof s->perChMaxTreeBws);
  memcpy(d->perChMaxNVLSTreeBws, s->perChMaxNVLSTreeBws, sizeof s->perChMaxNVLSTreeBws);
}

static ncclResult_t init_v7(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                            ncclNvlDomainInfo_v7_t* nvl, ncclTunerConstants_v7_t* constants) {
  if (ctx == NULL) return ncclSuccess;
  if (constants == NULL) return ctx_init(7, commId, nRanks, nNodes, log, nvl, NULL, ctx);
  ncclTunerConstants_v5_t k5;
  constants_v7_to_v5(&k5, constants);
  ncclResult_t res = ctx_init(7, commId, nRanks, nNodes, log, nvl, &k5, ctx);
  if (res == ncclSuccess) constants_v5_to_v7(constants, &k5);
  return res;
}
#endif

/* ---- v4 / v3 / v2 (2.21 .. 2.27) ---- */
static ncclResult_t init_v4(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** ctx) {
  if (ctx == NULL) return ncclSuccess;
  return ctx_init(4, 0, nRanks, nNodes, log, NULL, NULL, ctx);
}

static ncclResult_t init_v3(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** ctx) {
  if (ctx == NULL) return ncclSuccess;
  return ctx_init(3, 0, nRanks, nNodes, log, NULL, NULL, ctx);
}

static ncclResult_t init_v2(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** ctx) {
  if (ctx == NULL) return ncclSuccess;
  return ctx_init(2, 0, nRanks, nNodes, log, NULL, NULL, ctx);
}

static ncclResult_t get_coll_info_v3(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                     float** collCostTable, int numAlgo, int numProto, int* nChannels) {
  return cost_table_info(ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, nChannels);
}

/* v2 has no cost table: return the first ranked plan the support flags allow, else UNDEF (NCCL decides). */
static ncclResult_t get_coll_info_v2(void* ctx, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                                     int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels) {
  cp_ctx* c = ctx;
  int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
  unsigned channels = 0;
  if (c != NULL && c->block != NULL) {
    const uint8_t* plans = ctx_plans(c, collType, nBytes, numPipeOps);
    for (unsigned s = 0; plans != NULL && s < c->table->k; s++) {
      cp_plan p = cp_plan_at(plans + (size_t)s * CP_PLAN_BYTES);
      if (p.algo == CP_NO_PLAN) break;
      int collNet = p.algo == NCCL_ALGO_COLLNET_DIRECT || p.algo == NCCL_ALGO_COLLNET_CHAIN;
      int nvls = p.algo == NCCL_ALGO_NVLS || p.algo == NCCL_ALGO_NVLS_TREE;
      if ((collNet && !collNetSupport) || (nvls && !nvlsSupport)) continue;
      algo = (int)p.algo;
      proto = (int)p.proto;
      channels = p.channels;
      break;
    }
    if (c->trace) {
      if (algo >= 0)
        LOGF(c, NCCL_LOG_TRACE, "collplan: coll %d nBytes %zu numPipeOps %d -> %s/%s, nChannels %u", (int)collType,
             nBytes, numPipeOps, kAlgoNames[algo], kProtoNames[proto], channels);
      else
        LOGF(c, NCCL_LOG_TRACE, "collplan: coll %d nBytes %zu numPipeOps %d: NCCL decides", (int)collType, nBytes,
             numPipeOps);
    }
  }
  if (algorithm != NULL) *algorithm = algo;
  if (protocol != NULL) *protocol = proto;
  if (channels != 0 && nChannels != NULL) *nChannels = (int)channels;
  return ncclSuccess;
}

/* ---- exported plugin symbols: NCCL probes the newest first (v7 only with TUNER_V7=1) ---- */
#ifdef COLLPLAN_TUNER_V7
CP_EXPORT const ncclTuner_v7_t ncclTunerPlugin_v7 = {
    .name = CP_NAME,
    .init = init_v7,
    .getCollInfo = get_coll_info_v5,
    .finalize = ctx_finalize,
    .getChunkSize = get_chunk_size_v6,
};
#endif

CP_EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {
    .name = CP_NAME,
    .init = init_v6,
    .getCollInfo = get_coll_info_v5,
    .finalize = ctx_finalize,
    .getChunkSize = get_chunk_size_v6,
};

CP_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = CP_NAME,
    .init = init_v5,
    .getCollInfo = get_coll_info_v5,
    .finalize = ctx_finalize,
};

CP_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {
    .name = CP_NAME,
    .init = init_v4,
    .getCollInfo = get_coll_info_v5,
    .destroy = ctx_finalize,
};

CP_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {
    .name = CP_NAME,
    .init = init_v3,
    .getCollInfo = get_coll_info_v3,
    .destroy = ctx_finalize,
};

CP_EXPORT const ncclTuner_v2_t ncclTunerPlugin_v2 = {
    .name = CP_NAME,
    .init = init_v2,
    .getCollInfo = get_coll_info_v2,
    .destroy = ctx_finalize,
};
