/*
 * Named-communicator harness for libnccl-tuner-collplan.so: the tuner and the profiler of one
 * loaded library, in NCCL's order (tuner init, then profiler init with commName, then the
 * communicator's collectives), checking that the table's named blocks reach exactly the
 * communicators whose names were known at their first call (docs/tuner-rules.md).
 *
 *   rulesharness <so> <cases>
 *
 * Cases file, one directive per line ('#' comments), run through ABI v5 and v6 (each round with its
 * own commIds, so that names recorded in one round are not seen in the next):
 *   expect-log <text>                    some log message contains text
 *   expect-count <n> <text>              exactly n log messages contain text
 *   comm <i> <commId> <nNodes> <nRanks> <name|-> <early|late|none>
 *                                        communicator i; early: the profiler's init (with the name)
 *                                        runs after the tuner's and before any call, as in NCCL;
 *                                        late: right after the communicator's first call; none: never
 *   c <i> <coll> <pipeOps> <nBytes> <cell|-1> <nChannels>
 *                                        getCollInfo on communicator i with every one of 7 x 3 cells
 *                                        legal (cost 1): cell becomes 0.0, every other keeps 1.0, and
 *                                        nChannels (started at 24) ends as given
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nccl_profiler_abi.h"

#define NALGO 7
#define NPROTO 3
#define MAX_EXPECT 32
#define MSG_LEN 512

typedef struct {
  uint64_t commId;
  size_t nNodes, nRanks;
  char name[128];
  int hasName;
  char order; /* 'e' early, 'l' late, 'n' none */
  void* tctx;
  void* pctx;
  int calls;
} hcomm;

typedef struct {
  int comm, coll, pipeOps, cell, channels, line;
  uint64_t nBytes;
} hcase;

static char** g_msgs;
static size_t g_nMsgs, g_capMsgs;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line;
  char buf[MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_mu);
  if (g_nMsgs == g_capMsgs) {
    g_capMsgs = g_capMsgs ? 2 * g_capMsgs : 1024;
    g_msgs = realloc(g_msgs, g_capMsgs * sizeof *g_msgs);
    if (g_msgs == NULL) abort();
  }
  g_msgs[g_nMsgs++] = strdup(buf);
  pthread_mutex_unlock(&g_mu);
  if (getenv("HARNESS_VERBOSE") != NULL) fprintf(stderr, "log: %s\n", buf);
}

static size_t log_count(const char* text) {
  size_t n = 0;
  for (size_t i = 0; i < g_nMsgs; i++) n += strstr(g_msgs[i], text) != NULL;
  return n;
}

static int g_errors;
__attribute__((format(printf, 1, 2))) static void errorf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (g_errors < 20) {
    fprintf(stderr, "rulesharness: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
  }
  va_end(ap);
  g_errors++;
}

static void profiler_init(const ncclProfiler_v5_t* p5, const ncclProfiler_v6_t* p6, int abi, hcomm* c) {
  int mask = 0;
  ncclResult_t r = abi == 5 ? p5->init(&c->pctx, c->commId, &mask, c->hasName ? c->name : NULL, (int)c->nNodes,
                                       (int)c->nRanks, 0, logger)
                            : p6->init(&c->pctx, c->commId, &mask, c->hasName ? c->name : NULL, (int)c->nNodes,
                                       (int)c->nRanks, 0, logger);
  if (r != ncclSuccess) errorf("profiler init of comm %016" PRIx64 ": %d", c->commId, (int)r);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: rulesharness <so> <cases>\n");
    return 2;
  }
  void* so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    fprintf(stderr, "rulesharness: dlopen: %s\n", dlerror());
    return 2;
  }
  const ncclTuner_v5_t* t5 = dlsym(so, "ncclTunerPlugin_v5");
  const ncclTuner_v6_t* t6 = dlsym(so, "ncclTunerPlugin_v6");
  const ncclProfiler_v5_t* p5 = dlsym(so, "ncclProfiler_v5");
  const ncclProfiler_v6_t* p6 = dlsym(so, "ncclProfiler_v6");
  if (!t5 || !t6 || !p5 || !p6) {
    fprintf(stderr, "rulesharness: missing tuner v5/v6 or profiler v5/v6 symbols\n");
    return 2;
  }
  FILE* f = fopen(argv[2], "r");
  if (f == NULL) {
    perror(argv[2]);
    return 2;
  }
  hcomm* comms = NULL;
  hcase* cases = NULL;
  size_t nComms = 0, nCases = 0, capCases = 0;
  char expect[MAX_EXPECT][1024];
  long expectN[MAX_EXPECT];
  int nExpect = 0;
  char line[1024];
  for (int ln = 1; fgets(line, sizeof line, f) != NULL; ln++) {
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '#' || line[0] == '\0') continue;
    if (strncmp(line, "expect-log ", 11) == 0 || strncmp(line, "expect-count ", 13) == 0) {
      if (nExpect == MAX_EXPECT) return 2;
      long n = -1;
      const char* text = line + 11;
      if (line[7] == 'c') {
        char* end;
        n = strtol(line + 13, &end, 10);
        text = end + 1;
      }
      snprintf(expect[nExpect], sizeof expect[nExpect], "%s", text);
      expectN[nExpect++] = n;
    } else if (strncmp(line, "comm ", 5) == 0) {
      unsigned i;
      uint64_t id;
      size_t nn, nr;
      char name[128], order[8];
      name[0] = order[0] = 0;
      if (sscanf(line, "comm %u %" SCNx64 " %zu %zu %127s %7s", &i, &id, &nn, &nr, name, order) != 6 || i != nComms) {
        fprintf(stderr, "rulesharness: line %d: bad comm\n", ln);
        return 2;
      }
      comms = realloc(comms, (nComms + 1) * sizeof *comms);
      if (comms == NULL) return 2;
      hcomm* c = &comms[nComms++];
      memset(c, 0, sizeof *c);
      c->commId = id, c->nNodes = nn, c->nRanks = nr, c->order = order[0];
      c->hasName = strcmp(name, "-") != 0;
      snprintf(c->name, sizeof c->name, "%s", name);
    } else if (line[0] == 'c' && line[1] == ' ') {
      hcase k = {.line = ln};
      if (sscanf(line, "c %d %d %d %" SCNu64 " %d %d", &k.comm, &k.coll, &k.pipeOps, &k.nBytes, &k.cell,
                 &k.channels) != 6 ||
          k.comm < 0 || (size_t)k.comm >= nComms) {
        fprintf(stderr, "rulesharness: line %d: bad case\n", ln);
        return 2;
      }
      if (nCases == capCases) {
        capCases = capCases ? 2 * capCases : 1024;
        cases = realloc(cases, capCases * sizeof *cases);
        if (cases == NULL) return 2;
      }
      cases[nCases++] = k;
    } else {
      fprintf(stderr, "rulesharness: line %d: unknown directive\n", ln);
      return 2;
    }
  }
  fclose(f);

  for (int abi = 5; abi <= 6; abi++) {
    for (size_t i = 0; i < nComms; i++) {
      hcomm* c = &comms[i];
      c->commId ^= (uint64_t)abi << 56; /* a round of its own */
      c->calls = 0, c->pctx = NULL, c->tctx = NULL;
      ncclResult_t r = abi == 5 ? t5->init(&c->tctx, c->commId, c->nRanks, c->nNodes, logger, NULL, NULL)
                                : t6->init(&c->tctx, c->commId, c->nRanks, c->nNodes, logger, NULL, NULL);
      if (r != ncclSuccess) errorf("tuner init v%d comm %zu: %d", abi, i, (int)r);
      if (c->order == 'e') profiler_init(p5, p6, abi, c);
    }
    for (size_t j = 0; j < nCases; j++) {
      hcase* k = &cases[j];
      hcomm* c = &comms[k->comm];
      float cost[NALGO][NPROTO];
      for (int a = 0; a < NALGO; a++)
        for (int p = 0; p < NPROTO; p++) cost[a][p] = 1.0f;
      float* table = &cost[0][0];
      int ch = 24;
      ncclResult_t r = (abi == 5 ? t5->getCollInfo : t6->getCollInfo)(c->tctx, (ncclFunc_t)k->coll, k->nBytes,
                                                                      k->pipeOps, (float**)table, NALGO, NPROTO, 0,
                                                                      &ch);
      if (r != ncclSuccess) errorf("line %d v%d: getCollInfo returned %d", k->line, abi, (int)r);
      for (int cell = 0; cell < NALGO * NPROTO; cell++) {
        float want = cell == k->cell ? 0.0f : 1.0f;
        if (table[cell] != want)
          errorf("line %d v%d comm %d: cell %d is %g, want %g", k->line, abi, k->comm, cell, table[cell], want);
      }
      int wantCh = k->channels ? k->channels : 24;
      if (ch != wantCh) errorf("line %d v%d: nChannels %d, want %d", k->line, abi, ch, wantCh);
      if (c->calls++ == 0 && c->order == 'l') profiler_init(p5, p6, abi, c);
    }
    for (size_t i = 0; i < nComms; i++) {
      hcomm* c = &comms[i];
      if (c->pctx != NULL && (abi == 5 ? p5->finalize : p6->finalize)(c->pctx) != ncclSuccess)
        errorf("profiler finalize");
      if ((abi == 5 ? t5->finalize : t6->finalize)(c->tctx) != ncclSuccess) errorf("tuner finalize");
    }
  }
  for (int e = 0; e < nExpect; e++) {
    size_t n = log_count(expect[e]);
    if (expectN[e] < 0 ? n == 0 : n != (size_t)expectN[e])
      errorf("log: %zu messages contain \"%s\", want %s%ld", n, expect[e], expectN[e] < 0 ? "some, not " : "",
             expectN[e] < 0 ? 0L : expectN[e]);
  }
  for (size_t i = 0; i < g_nMsgs; i++) free(g_msgs[i]);
  free(g_msgs);
  free(comms);
  free(cases);
  dlclose(so);
  printf("rules: %zu comms, %zu cases x 2 ABIs, %d errors\n", nComms, nCases, g_errors);
  return g_errors ? 1 : 0;
}
