/*
 * Conformance harness for libnccl-tuner-collplan.so. It loads the plugin as NCCL does
 * (dlopen RTLD_NOW|RTLD_LOCAL, then the ncclTunerPlugin_vN symbols) and drives it with NCCL-shaped
 * cost tables read from a cases file that the Go test writes (plugin/ncclshim_test.go).
 *
 *   harness cases   <so> <cases>            every case through every ABI the file lists
 *   harness threads <so> <cases> <n>        n threads, each its own communicators, inits at once
 *   harness cycles  <so> <cases> <n>        n dlopen / init / calls / finalize / dlclose cycles
 *   harness bench   <so> <cases> <iters>    ns per v6 getCollInfo on the matched cases (the first
 *                                           HARNESS_BENCH_CASES of them when set)
 *   harness ranks   <so> <cases> <n>        n "ranks" of one job: per ABI, n sets of communicators with
 *                                           the same commIds, every case fed to each rank in turn;
 *                                           besides each case's expectation, every rank must force the
 *                                           same cell and nChannels as rank 0, call by call
 * HARNESS_STRIDE=n runs every n-th case (threads and cycles: each thread or cycle a different
 * n-th); HARNESS_VERBOSE=1 prints every log message. HARNESS_V7=1 requires the ncclTunerPlugin_v7
 * symbol (a `make shim TUNER_V7=1` build); otherwise the symbol must be absent.
 *
 * Cases file, one directive per line ('#' comments):
 *   abis 2 3 4 5 6 [7]                      ABIs to drive (default 2..6)
 *   logger null                             pass a NULL logger to init
 *   init-fails <code>                       every init must return code and leave a NULL context;
 *                                           that communicator's cases are then skipped
 *   expect-log <text>                       some log message must contain text
 *   expect-count <n> <text>                 exactly n log messages contain text
 *   constants <144 doubles>                 v5/v6 init on a matched comm must write these
 *   comm <nNodes> <nRanks> <nvlDomains> <minRanks> <maxRanks> <matched 0|1>
 *   c <nNodes> <nRanks> <coll> <pipeOps> <nBytes> <numAlgo> <numProto> <costs...> <cell|-1> <nChannels>
 *   v2 <nNodes> <nRanks> <coll> <pipeOps> <nBytes> <collNet> <nvls> <algo> <proto> <nChannels>
 *   k <nNodes> <nRanks> <coll> <nBytes> <algo> <proto> <nChannels> <chunkIn> <chunkOut>
 * A c case holds: the call returns ncclSuccess; the cell (if >= 0) becomes 0.0 and every other cell
 * and the canaries around the table keep their bits; *nChannels ends as given (0 = untouched, which
 * the harness tells from "set to 0" by starting every other case from 24).
 */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../nccl_tuner_abi.h"

#define MAX_CELLS 21
#define MAX_COMMS 64
#define MAX_EXPECT 32
#define NUM_CONSTANTS 144
#define CANARIES 4
#define MAX_MSGS 4096
#define MSG_LEN 640

/* ---- cases ---- */
typedef struct {
  char kind; /* 'c', '2' (v2), 'k' (chunk) */
  size_t nNodes, nRanks;
  int coll, pipeOps;
  uint64_t nBytes;
  int numAlgo, numProto;
  float cost[MAX_CELLS];
  int expCell, expChannels;
  int collNet, nvls, expAlgo, expProto;
  int algo, proto, nChannels;
  uint64_t chunkIn, chunkOut;
  int line;
} tcase;

typedef struct {
  size_t nNodes, nRanks;
  ncclNvlDomainInfo_v5_t nvl;
  int matched;
} tcomm;

typedef struct {
  tcase* cases;
  size_t n;
  tcomm comms[MAX_COMMS];
  int nComms;
  int abis[8];
  int nAbis;
  char expect[MAX_EXPECT][256];
  int expectCount[MAX_EXPECT]; /* -1: at least one */
  int nExpect;
  int hasConstants;
  double constants[NUM_CONSTANTS];
  int nullLogger;
  int initFails; /* 0: init must succeed */
} suite;

typedef struct {
  void* dl;
  const ncclTuner_v2_t* v2;
  const ncclTuner_v3_t* v3;
  const ncclTuner_v4_t* v4;
  const ncclTuner_v5_t* v5;
  const ncclTuner_v6_t* v6;
  const ncclTuner_v7_t* v7; /* NULL unless built with TUNER_V7=1 */
} plugin;

/* ---- logger: keeps messages for substring checks, counts what is logged inside calls ---- */
static pthread_mutex_t g_logMu = PTHREAD_MUTEX_INITIALIZER;
static char g_msgs[MAX_MSGS][MSG_LEN];
static int g_nMsgs;
static long g_badFlags;
static _Thread_local int tl_inCall; /* 1 in getCollInfo, 2 in getChunkSize */
static _Thread_local long tl_callMsgs, tl_callOnce, tl_callTrace;

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                        ...) {
  char buf[MSG_LEN - 16];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (tl_inCall) {
    tl_callMsgs++;
    if (strstr(buf, "once per communicator") != NULL) tl_callOnce++;
    if (level == NCCL_LOG_TRACE && tl_inCall == 1) tl_callTrace++; /* getCollInfo only */
  }
  pthread_mutex_lock(&g_logMu);
  if (flags != NCCL_TUNING || file == NULL || line <= 0) g_badFlags++;
  if (g_nMsgs < MAX_MSGS) snprintf(g_msgs[g_nMsgs++], MSG_LEN, "[%d] %s", (int)level, buf);
  pthread_mutex_unlock(&g_logMu);
  if (getenv("HARNESS_VERBOSE") != NULL) fprintf(stderr, "log[%d] %s\n", (int)level, buf);
}

static int log_count(const char* text) {
  int n = 0;
  pthread_mutex_lock(&g_logMu);
  for (int i = 0; i < g_nMsgs; i++) n += strstr(g_msgs[i], text) != NULL;
  pthread_mutex_unlock(&g_logMu);
  return n;
}

static void log_dump(FILE* f) {
  pthread_mutex_lock(&g_logMu);
  for (int i = 0; i < g_nMsgs && i < 40; i++) fprintf(f, "  log %s\n", g_msgs[i]);
  pthread_mutex_unlock(&g_logMu);
}

/* ---- parsing ---- */
static char* tok(char** p) {
  char* s = *p;
  while (*s == ' ' || *s == '\t') s++;
  if (*s == '\0' || *s == '\n' || *s == '\r') return NULL;
  char* e = s;
  while (*e && *e != ' ' && *e != '\t' && *e != '\n' && *e != '\r') e++;
  if (*e) *e++ = '\0';
  *p = e;
  return s;
}

static int parse_ll(char** p, long long* v) {
  char* t = tok(p);
  if (t == NULL) return 0;
  char* end;
  *v = strtoll(t, &end, 10);
  return *end == '\0';
}

static int parse_u64(char** p, uint64_t* v) {
  char* t = tok(p);
  if (t == NULL) return 0;
  char* end;
  *v = strtoull(t, &end, 10);
  return *end == '\0';
}

#define PI(p, dst)                            \
  do {                                        \
    long long v_;                             \
    if (!parse_ll((p), &v_)) goto syntax;     \
    (dst) = v_;                               \
  } while (0)

static int load_suite(const char* path, suite* s) {
  memset(s, 0, sizeof *s);
  for (int a = 0; a < 5; a++) s->abis[a] = 2 + a;
  s->nAbis = 5;
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    perror(path);
    return -1;
  }
  size_t cap = 0;
  char* line = NULL;
  size_t lineCap = 0;
  int lineNo = 0;
  while (getline(&line, &lineCap, f) > 0) {
    lineNo++;
    char* p = line;
    char* kw = tok(&p);
    if (kw == NULL || kw[0] == '#') continue;
    if (strcmp(kw, "abis") == 0) {
      s->nAbis = 0;
      long long v;
      while (s->nAbis < 8 && parse_ll(&p, &v)) {
        if (v < 2 || v > 7) goto syntax;
        s->abis[s->nAbis++] = (int)v;
      }
      continue;
    }
    if (strcmp(kw, "logger") == 0) {
      s->nullLogger = 1;
      continue;
    }
    if (strcmp(kw, "init-fails") == 0) {
      long long v;
      if (!parse_ll(&p, &v) || v <= 0 || v >= 8) goto syntax; /* an ncclResult_t error, 1..7 */
      s->initFails = (int)v;
      continue;
    }
    if (strcmp(kw, "expect-log") == 0 || strcmp(kw, "expect-count") == 0) {
      long long count = -1;
      if (kw[7] == 'c' && !parse_ll(&p, &count)) goto syntax;
      while (*p == ' ') p++;
      if (s->nExpect < MAX_EXPECT) {
        s->expectCount[s->nExpect] = (int)count;
        snprintf(s->expect[s->nExpect], sizeof s->expect[0], "%s", p);
        s->expect[s->nExpect][strcspn(s->expect[s->nExpect], "\r\n")] = '\0';
        s->nExpect++;
      }
      continue;
    }
    if (strcmp(kw, "constants") == 0) {
      for (int i = 0; i < NUM_CONSTANTS; i++) {
        char* t = tok(&p);
        if (t == NULL) goto syntax;
        s->constants[i] = strtod(t, NULL);
      }
      s->hasConstants = 1;
      continue;
    }
    if (strcmp(kw, "comm") == 0) {
      if (s->nComms >= MAX_COMMS) goto syntax;
      tcomm* c = &s->comms[s->nComms++];
      PI(&p, c->nNodes);
      PI(&p, c->nRanks);
      PI(&p, c->nvl.nNvlDomains);
      PI(&p, c->nvl.minRanksPerNvlDomain);
      PI(&p, c->nvl.maxRanksPerNvlDomain);
      PI(&p, c->matched);
      continue;
    }
    if (s->n == cap) {
      cap = cap ? cap * 2 : 1024;
      tcase* nc = realloc(s->cases, cap * sizeof *nc);
      if (nc == NULL) goto syntax;
      s->cases = nc;
    }
    tcase* c = &s->cases[s->n];
    memset(c, 0, sizeof *c);
    c->line = lineNo;
    if (strcmp(kw, "c") == 0) {
      c->kind = 'c';
      PI(&p, c->nNodes);
      PI(&p, c->nRanks);
      PI(&p, c->coll);
      PI(&p, c->pipeOps);
      if (!parse_u64(&p, &c->nBytes)) goto syntax;
      PI(&p, c->numAlgo);
      PI(&p, c->numProto);
      if (c->numAlgo < 1 || c->numProto < 1 || c->numAlgo * c->numProto > MAX_CELLS) goto syntax;
      for (int i = 0; i < c->numAlgo * c->numProto; i++) {
        char* t = tok(&p);
        if (t == NULL) goto syntax;
        c->cost[i] = strtof(t, NULL);
      }
      PI(&p, c->expCell);
      PI(&p, c->expChannels);
    } else if (strcmp(kw, "v2") == 0) {
      c->kind = '2';
      PI(&p, c->nNodes);
      PI(&p, c->nRanks);
      PI(&p, c->coll);
      PI(&p, c->pipeOps);
      if (!parse_u64(&p, &c->nBytes)) goto syntax;
      PI(&p, c->collNet);
      PI(&p, c->nvls);
      PI(&p, c->expAlgo);
      PI(&p, c->expProto);
      PI(&p, c->expChannels);
    } else if (strcmp(kw, "k") == 0) {
      c->kind = 'k';
      PI(&p, c->nNodes);
      PI(&p, c->nRanks);
      PI(&p, c->coll);
      if (!parse_u64(&p, &c->nBytes)) goto syntax;
      PI(&p, c->algo);
      PI(&p, c->proto);
      PI(&p, c->nChannels);
      if (!parse_u64(&p, &c->chunkIn) || !parse_u64(&p, &c->chunkOut)) goto syntax;
    } else {
      goto syntax;
    }
    s->n++;
  }
  free(line);
  fclose(f);
  return 0;
syntax:
  fprintf(stderr, "%s:%d: bad line\n", path, lineNo);
  free(line);
  fclose(f);
  return -1;
}

static void free_suite(suite* s) {
  free(s->cases);
  s->cases = NULL;
}

static const tcomm* find_comm(const suite* s, size_t nNodes, size_t nRanks) {
  for (int i = 0; i < s->nComms; i++)
    if (s->comms[i].nNodes == nNodes && s->comms[i].nRanks == nRanks) return &s->comms[i];
  return NULL;
}

/* ---- plugin loading ---- */
static int open_plugin(const char* so, plugin* p) {
  memset(p, 0, sizeof *p);
  p->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (p->dl == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", so, dlerror());
    return -1;
  }
  p->v2 = dlsym(p->dl, "ncclTunerPlugin_v2");
  p->v3 = dlsym(p->dl, "ncclTunerPlugin_v3");
  p->v4 = dlsym(p->dl, "ncclTunerPlugin_v4");
  p->v5 = dlsym(p->dl, "ncclTunerPlugin_v5");
  p->v6 = dlsym(p->dl, "ncclTunerPlugin_v6");
  p->v7 = dlsym(p->dl, "ncclTunerPlugin_v7");
  int bad = 0;
  const char* wantV7 = getenv("HARNESS_V7");
  if (wantV7 != NULL && strcmp(wantV7, "1") == 0) {
    if (p->v7 == NULL || p->v7->getChunkSize == NULL) {
      fprintf(stderr, "ncclTunerPlugin_v7 missing or without getChunkSize (HARNESS_V7=1)\n");
      bad = 1;
    }
  } else if (p->v7 != NULL) {
    fprintf(stderr, "ncclTunerPlugin_v7 is exported by a build without TUNER_V7=1\n");
    bad = 1;
  }
#define CHECK_SYM(sym, fin)                                                                              \
  if (sym == NULL || sym->name == NULL || strcmp(sym->name, "collplan") != 0 || sym->init == NULL ||     \
      sym->getCollInfo == NULL || sym->fin == NULL) {                                                    \
    fprintf(stderr, "symbol %s missing or incomplete\n", #sym);                                          \
    bad = 1;                                                                                             \
  }
  CHECK_SYM(p->v2, destroy)
  CHECK_SYM(p->v3, destroy)
  CHECK_SYM(p->v4, destroy)
  CHECK_SYM(p->v5, finalize)
  CHECK_SYM(p->v6, finalize)
  if (p->v7 != NULL) CHECK_SYM(p->v7, finalize)
  if (p->v6 != NULL && p->v6->getChunkSize == NULL) {
    fprintf(stderr, "ncclTunerPlugin_v6.getChunkSize is NULL\n");
    bad = 1;
  }
  if (bad) {
    dlclose(p->dl);
    return -1;
  }
  return 0;
}

static int close_plugin(plugin* p) {
  if (dlclose(p->dl) != 0) {
    fprintf(stderr, "dlclose: %s\n", dlerror());
    return -1;
  }
  return 0;
}

/* ---- running cases ---- */
typedef struct {
  size_t nNodes, nRanks;
  void* ctx;
  int matched;
  int failed; /* init failed as init-fails expects: no calls */
} live;

typedef struct {
  const plugin* p;
  const suite* s;
  int abi;
  int checkLogs; /* single-threaded runs: check what is logged during calls */
  unsigned salt;
  live comms[MAX_COMMS];
  int nLive;
  long errors;
  long calls, matchedCalls;
  int lastCell, lastChannels; /* what the last cost case forced (-1: nothing) and nChannels after it */
} runner;

__attribute__((format(printf, 3, 4))) static void failf(runner* r, const tcase* c, const char* fmt, ...) {
  r->errors++;
  if (r->errors > 20) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL abi v%d line %d: %s\n", r->abi, c ? c->line : 0, buf);
}

static const double kSentinel = 7.25;

/* The v5 constant (0..143) a v7 constant (0..158) mirrors, or -1 for the Rubin rows (compute
 * capability index 4 of each [5][3] bandwidth array), which the table does not carry. */
static int v7_to_v5_index(int i) {
  if (i < 84) return i; /* baseLatencies [7][3] and hwLatencies [3][7][3] */
  int arr = (i - 84) / 15, within = (i - 84) % 15;
  if (within / 3 == NCCL_RUBIN_COMPCAP_IDX) return -1;
  return 84 + arr * 12 + within;
}

static live* get_ctx(runner* r, const tcase* c) {
  for (int i = 0; i < r->nLive; i++)
    if (r->comms[i].nNodes == c->nNodes && r->comms[i].nRanks == c->nRanks) return &r->comms[i];
  if (r->nLive >= MAX_COMMS) {
    failf(r, c, "too many communicators");
    return NULL;
  }
  live* l = &r->comms[r->nLive++];
  l->nNodes = c->nNodes;
  l->nRanks = c->nRanks;
  const tcomm* tc = find_comm(r->s, c->nNodes, c->nRanks);
  l->matched = tc != NULL && tc->matched;
  ncclDebugLogger_t log = r->s->nullLogger ? NULL : test_logger;
  ncclResult_t res;
  void* ctx = (void*)&l; /* garbage: init must overwrite it */
  if (r->abi <= 4) {
    const ncclTuner_v2_t* t2 = r->p->v2;
    if (r->abi == 2) res = t2->init(c->nRanks, c->nNodes, log, &ctx);
    else if (r->abi == 3) res = r->p->v3->init(c->nRanks, c->nNodes, log, &ctx);
    else res = r->p->v4->init(c->nRanks, c->nNodes, log, &ctx);
  } else {
    ncclNvlDomainInfo_v5_t nvl = {0, 0, 0};
    if (tc != NULL) nvl = tc->nvl;
    ncclTunerConstants_v5_t k;
    double* kd = (double*)&k;
    for (int i = 0; i < NUM_CONSTANTS; i++) kd[i] = kSentinel;
    uint64_t commId = ((uint64_t)c->nNodes << 40) ^ ((uint64_t)c->nRanks << 8) ^ r->salt;
    int wantConstants = r->s->hasConstants && l->matched && r->s->initFails == 0; /* a failed init writes none */
    if (r->abi == 7) {
      ncclTunerConstants_v7_t k7;
      double* k7d = (double*)&k7;
      int n7 = (int)(sizeof k7 / sizeof(double));
      for (int i = 0; i < n7; i++) k7d[i] = kSentinel + (double)i; /* distinct: a shifted copy shows */
      res = r->p->v7->init(&ctx, commId, c->nRanks, c->nNodes, log, &nvl, &k7);
      for (int i = 0; i < n7; i++) {
        int j = v7_to_v5_index(i);
        double want = (wantConstants && j >= 0) ? r->s->constants[j] : kSentinel + (double)i;
        if (k7d[i] != want) {
          failf(r, c, "v7 constant %d (v5 index %d) after init is %g, want %g", i, j, k7d[i], want);
          break;
        }
      }
      goto inited;
    }
    if (r->abi == 5) res = r->p->v5->init(&ctx, commId, c->nRanks, c->nNodes, log, &nvl, &k);
    else res = r->p->v6->init(&ctx, commId, c->nRanks, c->nNodes, log, &nvl, &k);
    for (int i = 0; i < NUM_CONSTANTS; i++) {
      double want = wantConstants ? r->s->constants[i] : kSentinel;
      if (kd[i] != want) {
        failf(r, c, "constant %d after init is %g, want %g", i, kd[i], want);
        break;
      }
    }
  }
inited:
  if (r->s->initFails > 0) {
    if ((int)res != r->s->initFails) failf(r, c, "init returned %d, want %d", (int)res, r->s->initFails);
    if (ctx != NULL) failf(r, c, "a failed init left a context %p, want NULL", ctx);
    l->ctx = NULL;
    l->failed = 1;
    return l;
  }
  if (res != ncclSuccess) failf(r, c, "init returned %d", (int)res);
  if (ctx == (void*)&l || ctx == NULL) failf(r, c, "init left no context");
  l->ctx = ctx;
  return l;
}

static void finalize_all(runner* r) {
  for (int i = 0; i < r->nLive; i++) {
    ncclResult_t res;
    if (r->comms[i].failed) continue; /* NCCL finalizes no context it did not get */
    switch (r->abi) {
      case 2: res = r->p->v2->destroy(r->comms[i].ctx); break;
      case 3: res = r->p->v3->destroy(r->comms[i].ctx); break;
      case 4: res = r->p->v4->destroy(r->comms[i].ctx); break;
      case 5: res = r->p->v5->finalize(r->comms[i].ctx); break;
      case 7: res = r->p->v7->finalize(r->comms[i].ctx); break;
      default: res = r->p->v6->finalize(r->comms[i].ctx); break;
    }
    if (res != ncclSuccess) failf(r, NULL, "finalize returned %d", (int)res);
  }
  r->nLive = 0;
}

static const float kCanary[CANARIES] = {12345.5f, -777.25f, 3.0e30f, -0.0f};

static void run_cost_case(runner* r, live* l, const tcase* c) {
  float buf[CANARIES + MAX_CELLS + CANARIES];
  int cells = c->numAlgo * c->numProto;
  memcpy(buf, kCanary, sizeof kCanary);
  memcpy(buf + CANARIES, c->cost, (size_t)cells * sizeof(float));
  memcpy(buf + CANARIES + cells, kCanary, sizeof kCanary);
  /* NCCL passes 0 (keep its choice); every other case starts from another value to tell "left
   * alone" from "wrote 0". */
  const int initChannels = (c->line & 1) ? 0 : 24;
  const int wantChannels = c->expChannels ? c->expChannels : initChannels;
  int nChannels = initChannels;
  float** table = (float**)(void*)(buf + CANARIES); /* NCCL casts its float[][] the same way */
  ncclResult_t res;
  tl_inCall = 1;
  switch (r->abi) {
    case 3: res = r->p->v3->getCollInfo(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->pipeOps, table, c->numAlgo,
                                        c->numProto, &nChannels); break;
    case 4: res = r->p->v4->getCollInfo(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->pipeOps, table, c->numAlgo,
                                        c->numProto, 0, &nChannels); break;
    case 5: res = r->p->v5->getCollInfo(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->pipeOps, table, c->numAlgo,
                                        c->numProto, 1, &nChannels); break;
    case 7: res = r->p->v7->getCollInfo(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->pipeOps, table, c->numAlgo,
                                        c->numProto, 1, &nChannels); break;
    default: res = r->p->v6->getCollInfo(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->pipeOps, table, c->numAlgo,
                                         c->numProto, 0, &nChannels); break;
  }
  tl_inCall = 0;
  r->calls++;
  if (l->matched) r->matchedCalls++;
  if (res != ncclSuccess) failf(r, c, "getCollInfo returned %d", (int)res);
  if (memcmp(buf, kCanary, sizeof kCanary) != 0 || memcmp(buf + CANARIES + cells, kCanary, sizeof kCanary) != 0)
    failf(r, c, "wrote outside the %dx%d table", c->numAlgo, c->numProto);
  int got = -1;
  for (int i = 0; i < cells; i++) {
    float v = buf[CANARIES + i];
    if (memcmp(&v, &c->cost[i], sizeof v) == 0) continue;
    if (v == 0.0f && got < 0) {
      got = i;
      continue;
    }
    failf(r, c, "cell %d changed from %g to %g", i, (double)c->cost[i], (double)v);
  }
  if (got >= 0 && !(c->cost[got] >= 0.0f)) failf(r, c, "picked IGNORE cell %d (%g)", got, (double)c->cost[got]);
  /* A cell already at 0.0 that is forced again shows no change: accept it as the expected pick. */
  if (got < 0 && c->expCell >= 0 && c->cost[c->expCell] == 0.0f) got = c->expCell;
  r->lastCell = got;
  r->lastChannels = nChannels;
  if (got != c->expCell)
    failf(r, c, "forced cell %d (algo %d proto %d), want %d (algo %d proto %d)", got,
          got >= 0 ? got / c->numProto : -1, got >= 0 ? got % c->numProto : -1, c->expCell,
          c->expCell >= 0 ? c->expCell / c->numProto : -1, c->expCell >= 0 ? c->expCell % c->numProto : -1);
  if (nChannels != wantChannels) failf(r, c, "nChannels %d, want %d", nChannels, wantChannels);
}

static void run_v2_case(runner* r, live* l, const tcase* c) {
  const int initChannels = (c->line & 1) ? 0 : 24;
  const int wantChannels = c->expChannels ? c->expChannels : initChannels;
  int algo = 77, proto = 77, nChannels = initChannels;
  tl_inCall = 1;
  ncclResult_t res = r->p->v2->getCollInfo(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->collNet, c->nvls, c->pipeOps,
                                           &algo, &proto, &nChannels);
  tl_inCall = 0;
  r->calls++;
  if (l->matched) r->matchedCalls++;
  if (res != ncclSuccess) failf(r, c, "v2 getCollInfo returned %d", (int)res);
  if (algo != c->expAlgo || proto != c->expProto || nChannels != wantChannels)
    failf(r, c, "v2 gave algo %d proto %d nChannels %d, want %d %d %d", algo, proto, nChannels, c->expAlgo,
          c->expProto, wantChannels);
}

static void run_chunk_case(runner* r, live* l, const tcase* c) {
  size_t chunk = (size_t)c->chunkIn;
  tl_inCall = 2;
  ncclResult_t (*fn)(void*, ncclFunc_t, size_t, int, int, int, size_t*) =
      r->abi == 7 ? r->p->v7->getChunkSize : r->p->v6->getChunkSize;
  ncclResult_t res = fn(l->ctx, (ncclFunc_t)c->coll, c->nBytes, c->algo, c->proto, c->nChannels, &chunk);
  tl_inCall = 0;
  if (res != ncclSuccess) failf(r, c, "getChunkSize returned %d", (int)res);
  if (chunk != c->chunkOut) failf(r, c, "chunk %zu, want %" PRIu64, chunk, c->chunkOut);
}

/* Runs the suite's cases (every stride-th from offset) for one ABI; returns the error count. */
static long run_abi(const plugin* p, const suite* s, int abi, size_t stride, size_t offset, int checkLogs,
                    unsigned salt) {
  if (abi == 7 && p->v7 == NULL) {
    fprintf(stderr, "FAIL: the cases ask for ABI v7 but the plugin has no ncclTunerPlugin_v7\n");
    return 1;
  }
  runner* r = calloc(1, sizeof *r);
  if (r == NULL) return 1;
  r->p = p;
  r->s = s;
  r->abi = abi;
  r->checkLogs = checkLogs;
  r->salt = salt;
  tl_callMsgs = tl_callOnce = tl_callTrace = 0;
  for (size_t i = offset; i < s->n; i += stride) {
    const tcase* c = &s->cases[i];
    int want = (c->kind == 'c' && abi >= 3) || (c->kind == '2' && abi == 2) || (c->kind == 'k' && abi >= 6);
    if (!want) continue;
    live* l = get_ctx(r, c);
    if (l == NULL) break;
    if (l->failed) continue;
    if (c->kind == 'c') run_cost_case(r, l, c);
    else if (c->kind == '2') run_v2_case(r, l, c);
    else run_chunk_case(r, l, c);
  }
  if (checkLogs && !s->nullLogger) {
    const char* dbg = getenv("NCCL_DEBUG");
    int trace = dbg != NULL && strcasecmp(dbg, "TRACE") == 0;
    if (trace) {
      if (tl_callTrace != r->matchedCalls)
        failf(r, NULL, "%ld TRACE messages for %ld decisions on matched communicators", tl_callTrace,
              r->matchedCalls);
    } else if (tl_callMsgs != tl_callOnce || tl_callOnce > 3L * r->nLive) {
      failf(r, NULL, "%ld messages logged during calls (%ld one-shot) without NCCL_DEBUG=TRACE", tl_callMsgs,
            tl_callOnce);
    }
  }
  finalize_all(r);
  long errors = r->errors;
  if (errors) fprintf(stderr, "abi v%d: %ld errors in %ld calls\n", abi, errors, r->calls);
  free(r);
  return errors;
}

static long check_expectations(const suite* s) {
  long errors = 0;
  for (int i = 0; i < s->nExpect; i++) {
    int n = log_count(s->expect[i]);
    if (s->expectCount[i] < 0 && n == 0) {
      fprintf(stderr, "FAIL: no log message contains \"%s\"\n", s->expect[i]);
      errors++;
    } else if (s->expectCount[i] >= 0 && n != s->expectCount[i]) {
      fprintf(stderr, "FAIL: %d log messages contain \"%s\", want %d\n", n, s->expect[i], s->expectCount[i]);
      errors++;
    }
  }
  pthread_mutex_lock(&g_logMu);
  if (g_badFlags) {
    fprintf(stderr, "FAIL: %ld messages not logged under NCCL_TUNING with a file and line\n", g_badFlags);
    errors++;
  }
  pthread_mutex_unlock(&g_logMu);
  if (errors) log_dump(stderr);
  return errors;
}

/* ---- modes ---- */
static int mode_cases(const char* so, const suite* s, size_t stride) {
  plugin p;
  if (open_plugin(so, &p) != 0) return 1;
  long errors = 0, cases = 0;
  for (int a = 0; a < s->nAbis; a++) errors += run_abi(&p, s, s->abis[a], stride, 0, 1, (unsigned)a);
  for (size_t i = 0; i < s->n; i += stride) cases++;
  errors += check_expectations(s);
  if (close_plugin(&p) != 0) errors++;
  printf("cases: %ld cases x %d ABIs, %ld errors\n", cases, s->nAbis, errors);
  return errors != 0;
}

typedef struct {
  const plugin* p;
  const suite* s;
  pthread_barrier_t* start;
  int idx;
  size_t stride;
  long errors;
} worker;

static void* thread_main(void* arg) {
  worker* w = arg;
  int abi = w->s->abis[w->idx % w->s->nAbis];
  pthread_barrier_wait(w->start);
  w->errors = run_abi(w->p, w->s, abi, w->stride, (size_t)w->idx % w->stride, 0, (unsigned)w->idx);
  return NULL;
}

static int mode_threads(const char* so, const suite* s, int n, size_t stride) {
  plugin p;
  if (open_plugin(so, &p) != 0) return 1;
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n);
  worker* ws = calloc((size_t)n, sizeof *ws);
  pthread_t* ts = calloc((size_t)n, sizeof *ts);
  long errors = 0;
  int started = 0;
  if (ws == NULL || ts == NULL) return 1;
  for (int i = 0; i < n; i++) {
    ws[i] = (worker){.p = &p, .s = s, .start = &start, .idx = i, .stride = stride};
    if (pthread_create(&ts[i], NULL, thread_main, &ws[i]) != 0) {
      fprintf(stderr, "pthread_create %d failed\n", i);
      return 1; /* the barrier would never open */
    }
    started++;
  }
  for (int i = 0; i < started; i++) {
    pthread_join(ts[i], NULL);
    errors += ws[i].errors;
  }
  pthread_barrier_destroy(&start);
  free(ws);
  free(ts);
  errors += check_expectations(s);
  if (close_plugin(&p) != 0) errors++;
  printf("threads: %d threads, %ld errors\n", n, errors);
  return errors != 0;
}

static int mode_cycles(const char* so, const suite* s, int n, size_t stride) {
  long errors = 0;
  for (int i = 0; i < n; i++) {
    plugin p;
    if (open_plugin(so, &p) != 0) return 1;
    errors += run_abi(&p, s, s->abis[i % s->nAbis], stride, (size_t)i % stride, 1, (unsigned)i);
    if (close_plugin(&p) != 0) errors++;
    /* Really unloaded (no RTLD_NODELETE-like pinning): the next dlopen starts from scratch, as a
     * new NCCL communicator after the last one was destroyed. */
    void* still = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    if (still != NULL) {
      fprintf(stderr, "FAIL: the plugin is still loaded after dlclose (cycle %d)\n", i);
      errors++;
      dlclose(still);
    }
  }
  errors += check_expectations(s);
  printf("cycles: %d dlopen/dlclose cycles, %ld errors\n", n, errors);
  return errors != 0;
}

/* n ranks of one job (the same commIds: the same salt), each with its own contexts, fed every cost
 * case in turn: each call is checked against the case, and every rank's forced cell and nChannels
 * against rank 0's. */
static int mode_ranks(const char* so, const suite* s, int n) {
  plugin p;
  if (open_plugin(so, &p) != 0) return 1;
  long errors = 0, calls = 0;
  runner** rs = calloc((size_t)n, sizeof *rs);
  if (rs == NULL) return 1;
  for (int a = 0; a < s->nAbis; a++) {
    int abi = s->abis[a];
    if (abi < 3) continue; /* cost-table ABIs only */
    if (abi == 7 && p.v7 == NULL) {
      fprintf(stderr, "FAIL: the cases ask for ABI v7 but the plugin has no ncclTunerPlugin_v7\n");
      errors++;
      continue;
    }
    for (int k = 0; k < n; k++) {
      rs[k] = calloc(1, sizeof *rs[k]);
      if (rs[k] == NULL) return 1;
      *rs[k] = (runner){.p = &p, .s = s, .abi = abi, .salt = 7};
    }
    for (size_t i = 0; i < s->n; i++) {
      const tcase* c = &s->cases[i];
      if (c->kind != 'c') continue;
      for (int k = 0; k < n; k++) {
        live* l = get_ctx(rs[k], c);
        if (l == NULL) break;
        if (l->failed) continue;
        run_cost_case(rs[k], l, c);
        calls++;
        if (k > 0 && (rs[k]->lastCell != rs[0]->lastCell || rs[k]->lastChannels != rs[0]->lastChannels))
          failf(rs[k], c, "rank %d forced cell %d nChannels %d, rank 0 cell %d nChannels %d", k, rs[k]->lastCell,
                rs[k]->lastChannels, rs[0]->lastCell, rs[0]->lastChannels);
      }
    }
    for (int k = 0; k < n; k++) {
      finalize_all(rs[k]);
      errors += rs[k]->errors;
      free(rs[k]);
    }
  }
  free(rs);
  errors += check_expectations(s);
  if (close_plugin(&p) != 0) errors++;
  printf("ranks: %d ranks, %ld calls, %ld errors\n", n, calls, errors);
  return errors != 0;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static ncclResult_t bench_noop(void* ctx, ncclFunc_t coll, size_t nBytes, int pipeOps, float** table, int numAlgo,
                               int numProto, int regBuff, int* nChannels) {
  (void)ctx, (void)coll, (void)nBytes, (void)pipeOps, (void)table, (void)numAlgo, (void)numProto, (void)regBuff;
  (void)nChannels;
  return ncclSuccess;
}

static int mode_bench(const char* so, const suite* s, long iters) {
  plugin p;
  if (open_plugin(so, &p) != 0) return 1;
  runner* r = calloc(1, sizeof *r);
  size_t n = 0;
  const tcase** cs = calloc(s->n ? s->n : 1, sizeof *cs);
  void** ctxs = calloc(s->n ? s->n : 1, sizeof *ctxs);
  float(*tables)[MAX_CELLS] = calloc(s->n ? s->n : 1, sizeof *tables);
  if (r == NULL || cs == NULL || ctxs == NULL || tables == NULL) return 1;
  r->p = &p;
  r->s = s;
  r->abi = 6;
  for (size_t i = 0; i < s->n; i++) {
    const tcase* c = &s->cases[i];
    if (c->kind != 'c' || c->expCell < 0) continue; /* matched decisions only */
    live* l = get_ctx(r, c);
    if (l == NULL || !l->matched) continue;
    cs[n] = c;
    ctxs[n] = l->ctx;
    memcpy(tables[n], c->cost, sizeof c->cost);
    n++;
  }
  if (n == 0) {
    fprintf(stderr, "bench: no matched cases\n");
    return 1;
  }
  /* HARNESS_BENCH_CASES=m times only the first m matched cases: a working set that stays in cache,
   * as one communicator's few (collective, size) shapes do in a training step. */
  if (getenv("HARNESS_BENCH_CASES") != NULL) {
    size_t m = (size_t)strtoul(getenv("HARNESS_BENCH_CASES"), NULL, 10);
    if (m > 0 && m < n) n = m;
  }
  /* The calls' arguments, packed and in order: the loop reads 48 bytes per call and wraps without
   * a division, so that what it times is getCollInfo, not the harness (a 64-bit modulo per call and
   * the 200-byte case structs cost about as much as the call itself). */
  typedef struct {
    void* ctx;
    float** table;
    size_t nBytes;
    int coll, pipeOps, numAlgo, numProto;
  } benchCall;
  benchCall* calls = calloc(n, sizeof *calls);
  if (calls == NULL) return 1;
  for (size_t i = 0; i < n; i++)
    calls[i] = (benchCall){ctxs[i], (float**)(void*)tables[i], cs[i]->nBytes, cs[i]->coll, cs[i]->pipeOps,
                           cs[i]->numAlgo, cs[i]->numProto};
  /* Forcing a cell to 0.0 leaves the same decision for the next call, so tables need no reset. */
  int nChannels = 0;
  long errors = 0;
  double best = 1e300, bestLoop = 1e300;
  ncclResult_t (*volatile noop)(void*, ncclFunc_t, size_t, int, float**, int, int, int, int*) = bench_noop;
  for (int rep = 0; rep < 10; rep++) {
    /* Even reps time the plugin, odd ones the same loop around a no-op of the same signature. */
    ncclResult_t (*fn)(void*, ncclFunc_t, size_t, int, float**, int, int, int, int*) =
        rep % 2 == 0 ? p.v6->getCollInfo : noop;
    double t0 = now_ns();
    size_t i = 0;
    for (long it = 0; it < iters; it++) {
      const benchCall* c = &calls[i];
      if (fn(c->ctx, (ncclFunc_t)c->coll, c->nBytes, c->pipeOps, c->table, c->numAlgo, c->numProto, 0,
             &nChannels) != ncclSuccess)
        errors++;
      if (++i == n) i = 0;
    }
    double dt = (now_ns() - t0) / (double)iters;
    if (rep % 2 == 0 && dt < best) best = dt;
    if (rep % 2 == 1 && dt < bestLoop) bestLoop = dt;
  }
  free(calls);
  finalize_all(r);
  printf("bench: %zu matched cases, %ld calls x 5 runs, best %.1f ns/call (v6 getCollInfo); the loop around a no-op "
         "of the same signature: %.1f ns/call\n",
         n, iters, best, bestLoop);
  free(r);
  free(cs);
  free(ctxs);
  free(tables);
  if (close_plugin(&p) != 0) errors++;
  return errors != 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s cases|threads|cycles|bench|ranks <plugin.so> <cases-file> [n]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  const char* so = argv[2];
  long n = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
  suite s;
  if (load_suite(argv[3], &s) != 0) return 2;
  int rc;
  size_t stride = getenv("HARNESS_STRIDE") ? (size_t)strtoul(getenv("HARNESS_STRIDE"), NULL, 10) : 1;
  if (stride == 0) stride = 1;
  if (strcmp(mode, "cases") == 0) rc = mode_cases(so, &s, stride);
  else if (strcmp(mode, "threads") == 0) rc = mode_threads(so, &s, n > 0 ? (int)n : 64, stride);
  else if (strcmp(mode, "cycles") == 0) rc = mode_cycles(so, &s, n > 0 ? (int)n : 100, stride);
  else if (strcmp(mode, "bench") == 0) rc = mode_bench(so, &s, n > 0 ? n : 2000000);
  else if (strcmp(mode, "ranks") == 0) rc = mode_ranks(so, &s, n > 0 ? (int)n : 2);
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    rc = 2;
  }
  free_suite(&s);
  return rc;
}
