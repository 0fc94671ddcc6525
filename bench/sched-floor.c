// sched-floor: the cost of a collective's dependency pattern alone on this host, with no data and no
// library: 4 processes (more than the cores here; the optional fifth argument sets another power of
// two, e.g. 2 for one rank per core), one 8-byte flag per hop in shared memory, a waiter
// that polls 64 times and then calls sched_yield (what collplan's engine and OpenMPI's oversubscribed
// progress loop both do). Patterns, per iteration:
//   ring     NCCL's ring all-reduce of 4 non-empty chunks: 2(n-1) = 6 steps, every rank active at
//            every step (each waits for its ring predecessor's previous step);
//   chain    the same ring with one non-empty chunk: 6 dependent hops, one rank active at a time;
//   rd       recursive doubling (OpenMPI's small all-reduce): log2(n) = 2 pairwise exchanges.
// Binding: none, rr (rank r on cpu r mod 2, what collplan's launcher does when ranks outnumber
// cores) or blk (ranks 0,1 on cpu 0, 2,3 on cpu 1).
// Wait (optional fourth argument; the waits tried for the engine):
//   yield     64 polls, then sched_yield after every failed poll (the default);
//   yield0    sched_yield from the first failed poll (what the engine does when oversubscribed);
//   matespin  like yield0, but while the other rank bound to this core is waiting too, up to 200
//             pause-polls first (bound runs only);
//   futex     sleep in FUTEX_WAIT on the flag, woken by the poster's FUTEX_WAKE when it sees a
//             sleeper (shared futex on the shared mapping).
// Build and run: bench/run-sched-floor.sh (cc -O2).
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAXN = 8, WARMUP = 1000 };
static int N = 4; // ranks: the optional fifth argument, a power of two up to MAXN (rd needs one)

// A flag: the counter (32 bits, a futex word) and whether a waiter sleeps on it.
typedef struct {
    _Atomic int v;
    _Atomic int sleepers;
    char pad[56];
} line;

enum { WAIT_YIELD, WAIT_YIELD0, WAIT_MATESPIN, WAIT_FUTEX };
static int wait_mode;
static line *waiting; // waiting[r].v: rank r is in a wait (matespin)
static int me, mate;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int ready(line *l, int v) { return atomic_load_explicit(&l->v, memory_order_acquire) >= v; }

static void wait_ge(line *l, int v) {
    switch (wait_mode) {
    case WAIT_YIELD:
    case WAIT_YIELD0:
        for (int i = 0; !ready(l, v); i++)
            if (wait_mode == WAIT_YIELD0 || i >= 64) sched_yield();
        return;
    case WAIT_MATESPIN:
        if (ready(l, v)) return;
        atomic_store_explicit(&waiting[me].v, 1, memory_order_relaxed);
        for (int spun = 0; !ready(l, v);) {
            if (spun < 200 && atomic_load_explicit(&waiting[mate].v, memory_order_relaxed)) {
                spun++;
                __builtin_ia32_pause();
                continue;
            }
            sched_yield();
        }
        atomic_store_explicit(&waiting[me].v, 0, memory_order_relaxed);
        return;
    default:
        // Announce the sleeper before re-reading the counter; the poster stores the counter before
        // reading the announcement (both sequentially consistent), so one of them sees the other.
        while (!ready(l, v)) {
            atomic_store(&l->sleepers, 1);
            int cur = atomic_load(&l->v);
            if (cur >= v) return;
            syscall(SYS_futex, &l->v, FUTEX_WAIT, cur, 0, 0, 0);
        }
    }
}

// flag[from*N + to]: the counter rank `from` advances for rank `to`.
static line *flag;
static void post(int from, int to, int v) {
    line *l = &flag[from * N + to];
    if (wait_mode != WAIT_FUTEX) {
        atomic_store_explicit(&l->v, v, memory_order_release);
        return;
    }
    atomic_store(&l->v, v);
    if (atomic_load(&l->sleepers)) {
        atomic_store(&l->sleepers, 0);
        syscall(SYS_futex, &l->v, FUTEX_WAKE, INT_MAX, 0, 0, 0);
    }
}
static void wait_for(int from, int to, long v) { wait_ge(&flag[from * N + to], v); }

int main(int argc, char **argv) {
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: sched-floor ring|chain|rd none|rr|blk ITERS [yield|yield0|matespin|futex [RANKS]]\n");
        return 2;
    }
    const char *pat = argv[1], *bind = argv[2], *waitname = argc >= 5 ? argv[4] : "yield";
    if (argc == 6) N = atoi(argv[5]);
    int iters = atoi(argv[3]);
    wait_mode = !strcmp(waitname, "yield") ? WAIT_YIELD : !strcmp(waitname, "yield0") ? WAIT_YIELD0
              : !strcmp(waitname, "matespin") ? WAIT_MATESPIN : !strcmp(waitname, "futex") ? WAIT_FUTEX : -1;
    if (iters <= 0 || N < 2 || N > MAXN || (N & (N - 1)) != 0 || (strcmp(pat, "ring") && strcmp(pat, "chain") && strcmp(pat, "rd")) ||
        (strcmp(bind, "none") && strcmp(bind, "rr") && strcmp(bind, "blk")) || wait_mode < 0 ||
        (wait_mode == WAIT_MATESPIN && (!strcmp(bind, "none") || N != 4))) {
        fprintf(stderr, "sched-floor: bad arguments\n");
        return 2;
    }
    flag = mmap(0, sizeof(line) * N * N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    waiting = mmap(0, sizeof(line) * N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (flag == MAP_FAILED || waiting == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (int r = 0; r < N; r++) {
        if (fork() != 0) continue;
        me = r;
        mate = strcmp(bind, "rr") == 0 ? (r + 2) % N : r ^ 1; // the other rank on this core (matespin: 4 ranks only)
        if (strcmp(bind, "none")) {
            cpu_set_t s;
            CPU_ZERO(&s);
            CPU_SET(strcmp(bind, "rr") == 0 ? r % 2 : r * 2 / N, &s);
            if (sched_setaffinity(0, sizeof s, &s)) perror("sched_setaffinity");
        }
        int prev = (r + N - 1) % N, next = (r + 1) % N;
        int seq = 0;
        double t0 = 0;
        for (int it = 0; it < WARMUP + iters; it++) {
            if (it == WARMUP) t0 = now_ns();
            if (!strcmp(pat, "ring")) {
                post(r, next, seq + 1);
                for (int s = 1; s < 2 * (N - 1); s++) {
                    wait_for(prev, r, seq + s);
                    post(r, next, seq + s + 1);
                }
                wait_for(prev, r, seq + 2 * (N - 1));
                seq += 2 * (N - 1);
            } else if (!strcmp(pat, "chain")) {
                // Chunk 0 of NCCL's ring: at position h (0..6) rank (1+h)%N receives hop h-1 (h > 0)
                // and sends hop h (h < 6), the counter it advances reaching seq+h+1.
                for (int h = 0; h <= 2 * (N - 1); h++) {
                    if ((1 + h) % N != r) continue;
                    if (h > 0) wait_for(prev, r, seq + h);
                    if (h < 2 * (N - 1)) post(r, next, seq + h + 1);
                }
                seq += 2 * (N - 1) + 1;
            } else {
                for (int k = 1; k < N; k <<= 1) {
                    post(r, r ^ k, seq + 1);
                    wait_for(r ^ k, r, seq + 1);
                }
                seq += 1;
            }
        }
        if (r == 0) {
            printf("%-5s bind %-4s wait %-8s ranks %d %.2f us per iteration (%d iterations)\n", pat, bind, waitname, N,
                   (now_ns() - t0) / iters / 1e3, iters);
            fflush(stdout);
        }
        _exit(0);
    }
    int status, bad = 0;
    for (int r = 0; r < N; r++) {
        wait(&status);
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return bad;
}
