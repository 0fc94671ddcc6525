/*
 * Harness for the profiler plugin in libnccl-tuner-collplan.so. It loads the library as NCCL does
 * (dlopen, then ncclProfiler_v5 or ncclProfiler_v6) and plays NCCL's call sequence with synthetic
 * GPU timer stamps, from many threads at once, while the plugin's flush thread writes the dumps:
 *
 *   profharness run  <so> <5|6> <threads> <comms per thread> <events> <truth.jsonl>
 *   profharness init <so> <5|6>            one init (and finalize): prints "init rc=R mask=M"
 *
 * Per kernel plan: startEvent(Group); per collective startEvent(Coll) with its descriptor (parent:
 * the group), then, per channel, startEvent(KernelCh) with the start stamp, recordEventState
 * (ncclProfilerKernelChStop) with the stop stamp and stopEvent. Each Coll is stopped ("enqueued")
 * before, between or after its channels, as NCCL may; the Group is stopped after its collectives
 * are enqueued. Events of types the plugin did not activate (ProxyCtrl) must get no handle.
 *
 * HARNESS_PACE_US=n sleeps n us after each kernel plan (outside the timed calls).
 * HARNESS_SPLIT=1 plays it as NCCL's threads do: each worker thread (NCCL's user thread) starts and
 * stops Group and Coll events and hands every collective to a partner thread (NCCL's proxy
 * progress thread), which plays its KernelCh events while the worker stops ("enqueues") it.
 *
 * run writes the truth (what the dump must hold: each collective's fields and duration, computed
 * here from the stamps the harness made up) to truth.jsonl, one line per collective, and fails if
 * init's activation mask is not Coll|KernelCh, if any call returns an error, or if any call took
 * longer than HARNESS_MAX_CALL_NS (default 10 ms).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../nccl_profiler_abi.h"

static const char* const kFuncs[5] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
static const char* const kAlgos[7] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
static const char* const kProtos[3] = {"LL", "LL128", "SIMPLE"};
static const struct {
  const char* name;
  unsigned size;
} kTypes[] = {{"ncclInt8", 1},     {"ncclInt32", 4},      {"ncclUint64", 8},    {"ncclFloat16", 2},
              {"ncclBfloat16", 2}, {"ncclFloat32", 4},    {"ncclFloat64", 8},   {"ncclFloat8e4m3", 1}};
#define NTYPES (sizeof kTypes / sizeof kTypes[0])
#define MAX_GROUP 4
#define MAX_CH 8

typedef struct {
  int version;
  const ncclProfiler_v5_t* v5;
  const ncclProfiler_v6_t* v6;
} prof;

static ncclResult_t p_init(const prof* p, void** ctx, uint64_t id, int* mask, const char* name, int nNodes,
                           int nRanks, int rank) {
  return p->version == 5 ? p->v5->init(ctx, id, mask, name, nNodes, nRanks, rank, NULL)
                         : p->v6->init(ctx, id, mask, name, nNodes, nRanks, rank, NULL);
}

static ncclResult_t p_finalize(const prof* p, void* ctx) {
  return p->version == 5 ? p->v5->finalize(ctx) : p->v6->finalize(ctx);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64 */
static uint64_t rnd(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct jobq;

typedef struct {
  const prof* p;
  struct jobq* q; /* HARNESS_SPLIT: the partner thread's queue */
  int idx, nComms;
  long events; /* this thread's share */
  long paceUs; /* HARNESS_PACE_US: a sleep after each kernel plan, to spread the run over time */
  uint64_t maxCallNs, maxLifeNs, bound;
  long errors, calls, started, slow;
  long vcsw, ivcsw; /* the event loop's voluntary (waits) and involuntary (preemptions) switches */
  char* truth; /* JSONL, built in memory: no I/O while timing */
  size_t truthLen, truthCap;
  pthread_barrier_t* start;
} worker;

__attribute__((format(printf, 2, 3))) static void truthf(worker* w, const char* fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(w->truth + w->truthLen, w->truthCap - w->truthLen, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < w->truthCap - w->truthLen) {
      w->truthLen += (size_t)n;
      return;
    }
    size_t cap = w->truthCap * 2 + (size_t)n;
    char* t = realloc(w->truth, cap);
    if (t == NULL) {
      w->errors++;
      return;
    }
    w->truth = t;
    w->truthCap = cap;
  }
}

/* Event calls (start, stop, record): timed against the bound. */
#define TIMED(w, call)                                              \
  do {                                                              \
    uint64_t t0_ = now_ns();                                        \
    ncclResult_t r_ = (call);                                       \
    uint64_t dt_ = now_ns() - t0_;                                  \
    (w)->calls++;                                                   \
    if (dt_ > (w)->maxCallNs) (w)->maxCallNs = dt_;                 \
    if (dt_ > (w)->bound) (w)->slow++;                              \
    if (r_ != ncclSuccess) {                                        \
      (w)->errors++;                                                \
      fprintf(stderr, "FAIL: %s returned %d\n", #call, (int)r_);    \
    }                                                               \
  } while (0)

/* init and finalize (file creation, the final flush, the flush thread's join): reported only. */
#define LIFE(w, call)                                               \
  do {                                                              \
    uint64_t t0_ = now_ns();                                        \
    ncclResult_t r_ = (call);                                       \
    uint64_t dt_ = now_ns() - t0_;                                  \
    if (dt_ > (w)->maxLifeNs) (w)->maxLifeNs = dt_;                 \
    if (r_ != ncclSuccess) {                                        \
      (w)->errors++;                                                \
      fprintf(stderr, "FAIL: %s returned %d\n", #call, (int)r_);    \
    }                                                               \
  } while (0)

/* One descriptor in the plugin's version (the v6 one starts like v5's, with a larger union). */
typedef union {
  ncclProfilerEventDescr_v5_t v5;
  ncclProfilerEventDescr_v6_t v6;
} descr;

/* startEvent, checking that the plugin wrote nothing into the descriptor NCCL hands over (it gets a
 * non-const pointer). */
static ncclResult_t p_start(worker* w, void* ctx, void** h, descr* d) {
  descr before;
  memcpy(&before, d, sizeof before);
  ncclResult_t r = w->p->version == 5 ? w->p->v5->startEvent(ctx, h, &d->v5) : w->p->v6->startEvent(ctx, h, &d->v6);
  if (memcmp(&before, d, sizeof before) != 0) {
    fprintf(stderr, "FAIL: startEvent wrote into the event descriptor\n");
    w->errors++;
  }
  return r;
}

static ncclResult_t p_stop(worker* w, void* h) {
  return w->p->version == 5 ? w->p->v5->stopEvent(h) : w->p->v6->stopEvent(h);
}

static ncclResult_t p_record(worker* w, void* h, uint64_t stop) {
  ncclProfilerEventStateArgs_v5_t a;
  memset(&a, 0, sizeof a);
  a.kernelCh.pTimer = stop;
  return w->p->version == 5 ? w->p->v5->recordEventState(h, ncclProfilerKernelChStop, &a)
                            : w->p->v6->recordEventState(h, ncclProfilerKernelChStop, &a);
}

typedef struct {
  void* ctx;
  uint64_t id;
  int nRanks;
  uint64_t seq[5];
  uint64_t clock;
} hcomm;

/* One collective handed to the channel-playing side. */
typedef struct {
  hcomm* c;
  void* coll;
  int func, algo, proto, nch, type, numPipeOps, stopAt, done;
  uint64_t count, seq;
} job;

#define QCAP 256
typedef struct jobq {
  pthread_mutex_t mu;
  pthread_cond_t notEmpty, notFull;
  job jobs[QCAP];
  unsigned head, len;
  worker* w; /* the partner's counters and truth */
} jobq;

static void q_push(jobq* q, const job* j) {
  pthread_mutex_lock(&q->mu);
  while (q->len == QCAP) pthread_cond_wait(&q->notFull, &q->mu);
  q->jobs[(q->head + q->len++) % QCAP] = *j;
  pthread_cond_signal(&q->notEmpty);
  pthread_mutex_unlock(&q->mu);
}

static job q_pop(jobq* q) {
  pthread_mutex_lock(&q->mu);
  while (q->len == 0) pthread_cond_wait(&q->notEmpty, &q->mu);
  job j = q->jobs[q->head];
  q->head = (q->head + 1) % QCAP;
  q->len--;
  pthread_cond_signal(&q->notFull);
  pthread_mutex_unlock(&q->mu);
  return j;
}

/* The collective's kernel channels (and, when stopAt >= 0, its own stop after that many), then its
 * truth line. */
static void play_channels(worker* w, uint64_t* rs, const job* j) {
  hcomm* c = j->c;
  descr d;
  uint64_t first = UINT64_MAX, last = 0;
  for (int ch = 0; ch <= j->nch; ch++) {
    if (ch == j->stopAt) TIMED(w, p_stop(w, j->coll));
    if (ch == j->nch) break;
    uint64_t st = c->clock + rnd(rs) % 5000;
    uint64_t e = st + 1 + rnd(rs) % 200000;
    if (st < first) first = st;
    if (e > last) last = e;
    memset(&d, 0, sizeof d);
    d.v5.type = ncclProfileKernelCh;
    d.v5.parentObj = j->coll;
    d.v5.kernelCh.channelId = (uint8_t)ch;
    d.v5.kernelCh.pTimer = st;
    void* h = NULL;
    TIMED(w, p_start(w, c->ctx, &h, &d));
    TIMED(w, p_record(w, h, e));
    TIMED(w, p_stop(w, h));
  }
  c->clock += 1000000;
  uint64_t bytes = j->count * kTypes[j->type].size;
  if (j->func == 2 || j->func == 3) bytes *= (uint64_t)c->nRanks;
  truthf(w,
         "{\"commId\":\"%016" PRIx64 "\",\"seq\":%" PRIu64 ",\"coll\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\","
         "\"nChannels\":%d,\"count\":%" PRIu64 ",\"datatype\":\"%s\",\"bytes\":%" PRIu64
         ",\"numPipeOps\":%d,\"startNs\":%" PRIu64 ",\"ns\":%" PRIu64 "}\n",
         c->id, j->seq, kFuncs[j->func], kAlgos[j->algo], kProtos[j->proto], j->nch, j->count, kTypes[j->type].name,
         bytes, j->numPipeOps, first, last - first);
}

static void* proxy_main(void* arg) {
  jobq* q = arg;
  uint64_t rs = 0x9e0c0000ull + (uint64_t)q->w->idx;
  for (;;) {
    job j = q_pop(q);
    if (j.done) break;
    play_channels(q->w, &rs, &j);
  }
  return NULL;
}

static void* worker_main(void* arg) {
  worker* w = arg;
  uint64_t rs = 0x5eed0000ull + (uint64_t)w->idx;
  hcomm* comms = calloc((size_t)w->nComms, sizeof *comms);
  if (comms == NULL) {
    w->errors++;
    return NULL;
  }
  pthread_t proxy;
  if (w->q != NULL && pthread_create(&proxy, NULL, proxy_main, w->q) != 0) {
    w->errors++;
    free(comms);
    pthread_barrier_wait(w->start);
    return NULL;
  }
  pthread_barrier_wait(w->start);
  for (int i = 0; i < w->nComms; i++) {
    hcomm* c = &comms[i];
    c->id = ((uint64_t)(w->idx + 1) << 40) | ((uint64_t)i << 8) | (uint64_t)w->p->version;
    c->nRanks = 2 + (int)(rnd(&rs) % 15);
    c->clock = 1000000000ull * (uint64_t)(i + 1);
    char name[32];
    snprintf(name, sizeof name, "t%d-c%d", w->idx, i);
    int mask = -1;
    LIFE(w, p_init(w->p, &c->ctx, c->id, &mask, name, 1 + c->nRanks / 8, c->nRanks, (int)(rnd(&rs) % 2)));
    if (mask != (ncclProfileColl | ncclProfileKernelCh) || c->ctx == NULL) {
      fprintf(stderr, "FAIL: init gave mask %#x context %p, want %#x and a context\n", mask, c->ctx,
              ncclProfileColl | ncclProfileKernelCh);
      w->errors++;
      free(comms);
      return NULL;
    }
  }
  struct rusage ru0, ru1;
  getrusage(RUSAGE_THREAD, &ru0);
  while (w->started < w->events) {
    hcomm* c = &comms[rnd(&rs) % (uint64_t)w->nComms];
    descr d;
    memset(&d, 0, sizeof d);
    d.v5.type = ncclProfileGroup;
    void* group = NULL;
    TIMED(w, p_start(w, c->ctx, &group, &d));
    w->started++;
    /* An event type that was not activated: no handle. */
    if (rnd(&rs) % 16 == 0) {
      void* h = (void*)&d;
      memset(&d, 0, sizeof d);
      d.v5.type = ncclProfileProxyCtrl;
      TIMED(w, p_start(w, c->ctx, &h, &d));
      if (h != NULL) {
        fprintf(stderr, "FAIL: a ProxyCtrl event got a handle\n");
        w->errors++;
      }
    }
    int n = 1 + (int)(rnd(&rs) % MAX_GROUP);
    void* coll[MAX_GROUP];
    int func[MAX_GROUP], algo[MAX_GROUP], proto[MAX_GROUP], nch[MAX_GROUP], type[MAX_GROUP], stopAt[MAX_GROUP];
    uint64_t count[MAX_GROUP], seq[MAX_GROUP];
    for (int k = 0; k < n; k++) {
      func[k] = (int)(rnd(&rs) % 5);
      algo[k] = (int)(rnd(&rs) % 7);
      proto[k] = (int)(rnd(&rs) % 3);
      nch[k] = 1 + (int)(rnd(&rs) % MAX_CH);
      type[k] = (int)(rnd(&rs) % NTYPES);
      count[k] = 1 + (rnd(&rs) >> (20 + rnd(&rs) % 40));
      seq[k] = c->seq[func[k]]++;
      stopAt[k] = (int)(rnd(&rs) % (unsigned)(nch[k] + 1)); /* enqueued after this many channels */
      memset(&d, 0, sizeof d);
      d.v5.type = ncclProfileColl;
      d.v5.parentObj = NULL; /* the CollApi event: not activated */
      d.v5.rank = 0;
      d.v5.coll.seqNumber = seq[k];
      d.v5.coll.func = kFuncs[func[k]];
      d.v5.coll.count = count[k];
      d.v5.coll.datatype = kTypes[type[k]].name;
      d.v5.coll.nChannels = (uint8_t)nch[k];
      d.v5.coll.nWarps = 16;
      d.v5.coll.algo = kAlgos[algo[k]];
      d.v5.coll.proto = kProtos[proto[k]];
      d.v5.coll.parentGroup = group;
      coll[k] = NULL;
      TIMED(w, p_start(w, c->ctx, &coll[k], &d));
      w->started++;
      if (coll[k] == NULL) {
        fprintf(stderr, "FAIL: a Coll event got no handle\n");
        w->errors++;
      }
    }
    if (group != NULL && rnd(&rs) % 2) {
      TIMED(w, p_stop(w, group));
      group = NULL;
    }
    for (int k = 0; k < n; k++) {
      job j = {.c = c, .coll = coll[k], .func = func[k], .algo = algo[k], .proto = proto[k], .nch = nch[k],
               .type = type[k], .numPipeOps = n, /* the group's collective count */ .stopAt = stopAt[k], .count = count[k],
               .seq = seq[k]};
      if (w->q == NULL) {
        play_channels(w, &rs, &j);
      } else {
        j.stopAt = -1; /* the worker stops it, racing with the partner's channels */
        q_push(w->q, &j);
      }
      w->started += nch[k]; /* the KernelCh events, wherever they are played */
    }
    if (w->q != NULL)
      for (int k = 0; k < n; k++) TIMED(w, p_stop(w, coll[k]));
    if (group != NULL) TIMED(w, p_stop(w, group));
    if (w->paceUs > 0) {
      struct timespec ts = {0, w->paceUs * 1000L};
      nanosleep(&ts, NULL);
    }
  }
  getrusage(RUSAGE_THREAD, &ru1);
  if (w->q != NULL) {
    job done = {.done = 1};
    q_push(w->q, &done);
    pthread_join(proxy, NULL);
  }
  w->vcsw = ru1.ru_nvcsw - ru0.ru_nvcsw;
  w->ivcsw = ru1.ru_nivcsw - ru0.ru_nivcsw;
  for (int i = 0; i < w->nComms; i++) LIFE(w, p_finalize(w->p, comms[i].ctx));
  free(comms);
  return NULL;
}

static int load(const char* so, int version, prof* p, void** dl) {
  *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (*dl == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", so, dlerror());
    return -1;
  }
  memset(p, 0, sizeof *p);
  p->version = version;
  p->v5 = dlsym(*dl, "ncclProfiler_v5");
  p->v6 = dlsym(*dl, "ncclProfiler_v6");
  const void* want = version == 5 ? (const void*)p->v5 : (const void*)p->v6;
  if (want == NULL || (version != 5 && version != 6)) {
    fprintf(stderr, "no ncclProfiler_v%d in %s\n", version, so);
    dlclose(*dl);
    return -1;
  }
  const char* name = version == 5 ? p->v5->name : p->v6->name;
  if (name == NULL || strcmp(name, "collplan") != 0) {
    fprintf(stderr, "ncclProfiler_v%d.name is not collplan\n", version);
    dlclose(*dl);
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s run|init <so> <5|6> [threads comms events truth]\n", argv[0]);
    return 2;
  }
  int version = atoi(argv[3]);
  prof p;
  void* dl;
  if (load(argv[2], version, &p, &dl) != 0) return 1;
  if (strcmp(argv[1], "init") == 0) {
    void* ctx = (void*)&p;
    int mask = -1;
    ncclResult_t rc = p_init(&p, &ctx, 0x1234, &mask, "init-only", 1, 2, 0);
    printf("init rc=%d mask=%d context=%s\n", (int)rc, mask, ctx == NULL ? "null" : "set");
    if (ctx != NULL && ctx != (void*)&p) p_finalize(&p, ctx);
    dlclose(dl);
    return 0;
  }
  if (argc < 8 || strcmp(argv[1], "run") != 0) {
    fprintf(stderr, "usage: %s run <so> <5|6> <threads> <comms> <events> <truth>\n", argv[0]);
    return 2;
  }
  int nThreads = atoi(argv[4]), nComms = atoi(argv[5]);
  long events = atol(argv[6]);
  if (nThreads < 1 || nComms < 1 || events < 1) return 2;
  uint64_t bound = 10000000ull;
  if (getenv("HARNESS_MAX_CALL_NS") != NULL) bound = strtoull(getenv("HARNESS_MAX_CALL_NS"), NULL, 10);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)nThreads);
  int split = getenv("HARNESS_SPLIT") != NULL && strcmp(getenv("HARNESS_SPLIT"), "1") == 0;
  int nWorkers = split ? 2 * nThreads : nThreads; /* the partners after the workers */
  worker* ws = calloc((size_t)nWorkers, sizeof *ws);
  jobq* qs = calloc((size_t)nThreads, sizeof *qs);
  pthread_t* ts = calloc((size_t)nThreads, sizeof *ts);
  if (ws == NULL || ts == NULL || qs == NULL) return 1;
  for (int i = nThreads; i < nWorkers; i++) {
    ws[i] = (worker){.p = &p, .idx = i, .bound = bound};
    ws[i].truthCap = 1 << 16;
    ws[i].truth = malloc(ws[i].truthCap);
    if (ws[i].truth == NULL) return 1;
    jobq* q = &qs[i - nThreads];
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->notEmpty, NULL);
    pthread_cond_init(&q->notFull, NULL);
    q->w = &ws[i];
  }
  uint64_t t0 = now_ns();
  for (int i = 0; i < nThreads; i++) {
    ws[i] = (worker){.p = &p, .idx = i, .nComms = nComms, .events = (events + nThreads - 1) / nThreads,
                     .bound = bound, .start = &start, .q = split ? &qs[i] : NULL,
                     .paceUs = getenv("HARNESS_PACE_US") != NULL ? atol(getenv("HARNESS_PACE_US")) : 0};
    ws[i].truthCap = 1 << 16;
    ws[i].truth = malloc(ws[i].truthCap);
    if (ws[i].truth == NULL || pthread_create(&ts[i], NULL, worker_main, &ws[i]) != 0) {
      fprintf(stderr, "thread %d failed to start\n", i);
      return 1; /* the barrier would never open */
    }
  }
  long errors = 0, calls = 0, started = 0, slow = 0, vcsw = 0, ivcsw = 0;
  uint64_t maxCall = 0, maxLife = 0;
  for (int i = 0; i < nThreads; i++) pthread_join(ts[i], NULL);
  for (int i = 0; i < nWorkers; i++) {
    errors += ws[i].errors;
    calls += ws[i].calls;
    started += ws[i].started;
    slow += ws[i].slow;
    vcsw += ws[i].vcsw;
    ivcsw += ws[i].ivcsw;
    if (ws[i].maxCallNs > maxCall) maxCall = ws[i].maxCallNs;
    if (ws[i].maxLifeNs > maxLife) maxLife = ws[i].maxLifeNs;
  }
  double secs = (double)(now_ns() - t0) / 1e9;
  FILE* f = fopen(argv[7], "w");
  if (f == NULL) {
    perror(argv[7]);
    return 1;
  }
  for (int i = 0; i < nWorkers; i++) {
    fwrite(ws[i].truth, 1, ws[i].truthLen, f);
    free(ws[i].truth);
  }
  fclose(f);
  /* A shared host preempts threads for milliseconds now and then: HARNESS_MAX_SLOW calls over the
   * bound are allowed (default 0). An event path waiting for a flush's I/O would put a call over
   * the bound at every flush it met. */
  long maxSlow = getenv("HARNESS_MAX_SLOW") != NULL ? atol(getenv("HARNESS_MAX_SLOW")) : 0;
  if (slow > maxSlow) {
    fprintf(stderr, "FAIL: %ld event calls took longer than %.3f ms (the slowest %.3f ms; %ld allowed)\n", slow,
            (double)bound / 1e6, (double)maxCall / 1e6, maxSlow);
    errors++;
  }
  pthread_barrier_destroy(&start);
  for (int i = 0; split && i < nThreads; i++) {
    pthread_mutex_destroy(&qs[i].mu);
    pthread_cond_destroy(&qs[i].notEmpty);
    pthread_cond_destroy(&qs[i].notFull);
  }
  free(qs);
  free(ws);
  free(ts);
  if (dlclose(dl) != 0) errors++;
  printf("run: v%d%s, %d threads x %d comms, %ld events started, %ld event calls in %.2f s, slowest event call %.1f us "
         "(%ld over %.1f ms), slowest init/finalize %.1f us, %ld waits and %ld preemptions in the event loops, %ld "
         "errors\n",
         version, split ? " (split: channels on partner threads)" : "", nThreads, nComms, started, calls, secs, (double)maxCall / 1e3, slow, (double)bound / 1e6,
         (double)maxLife / 1e3, vcsw, ivcsw, errors);
  return errors != 0;
}
