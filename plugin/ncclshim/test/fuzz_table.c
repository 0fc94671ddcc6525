/*
 * Mutation fuzzer for the table reader (cptable.c), meant to run under -fsanitize=address,undefined:
 * it corrupts a valid table (header fields, offsets, counts, plan bytes, truncation), reseals the
 * checksum most of the time so the structural checks are reached, and for every file the reader
 * accepts it performs lookups across every block, collective and pipe-op count. Any out-of-bounds
 * read, overflow or crash is a reader bug.
 *
 *   fuzz_table <table> <iterations> [seed]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cptable.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t interesting32(size_t size) {
  switch (rnd() % 10) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 0xFFFFFFFFu;
    case 3: return (uint32_t)size;
    case 4: return (uint32_t)size - 8;
    case 5: return 0x80000000u;
    case 6: return (uint32_t)(rnd() % (size + 64));
    case 7: return 64;
    case 8: return (uint32_t)(rnd() % 16);
    default: return (uint32_t)rnd();
  }
}

static void mutate(uint8_t* d, size_t* size) {
  int n = 1 + (int)(rnd() % 4);
  for (int m = 0; m < n && *size >= 8; m++) {
    size_t off;
    switch (rnd() % 6) {
      case 0: /* a header field */
        off = 32 + 4 * (rnd() % 4);
        if (off + 4 <= *size) put32(d + off, interesting32(*size));
        break;
      case 1: /* a block directory or class directory word (the start of the data area) */
        off = (64 + 4 * (rnd() % 256));
        if (off + 4 <= *size) put32(d + off, interesting32(*size));
        break;
      case 2: /* any aligned word */
        off = (size_t)(rnd() % (*size / 4)) * 4;
        if (off + 4 <= *size) put32(d + off, interesting32(*size));
        break;
      case 3: /* any byte */
        d[rnd() % *size] = (uint8_t)rnd();
        break;
      case 4: /* a 64-bit value (starts, constants) */
        off = (size_t)(rnd() % (*size / 8)) * 8;
        if (off + 8 <= *size) put64(d + off, rnd() % 3 ? rnd() >> (rnd() % 64) : 0);
        break;
      default: /* truncate, fixing the file-bytes field */
        *size = 8 + (size_t)(rnd() % (*size - 7));
        if (*size >= 24) put64(d + 16, *size);
        break;
    }
  }
  if (*size >= CP_HEADER_BYTES && rnd() % 8 != 0) put64(d + 24, cp_fnv1a64(d + CP_CHECKSUM_FROM, *size - CP_CHECKSUM_FROM));
}

static unsigned long exercise(const cp_table* t) {
  unsigned long sum = 0;
  static const uint64_t sizes[] = {0, 1, 1000, 65536, 1u << 20, 123456789, 1ull << 40, ~0ull};
  for (uint32_t b = 0; b < t->nBlocks; b++) {
    const cp_block* blk = &t->blocks[b];
    for (unsigned coll = 0; coll < CP_NUM_COLLS + 1; coll++) {
      for (int pipe = (int)blk->p0 - 1; pipe <= (int)blk->p1 + 1 && pipe <= (int)blk->p0 + 8; pipe++) {
        const cp_class* c = cp_block_class(blk, coll, pipe);
        if (c == NULL) continue;
        /* The fixed sizes, then each start of the class and its neighbours, then random sizes. */
        uint64_t probe[sizeof sizes / sizeof sizes[0] + 3 * 16 + 16];
        size_t np = 0;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) probe[np++] = sizes[s];
        for (uint32_t i = 0; i < c->n && i < 16; i++) {
          uint64_t st = cp_le64(t->data + c->startsOff + (size_t)i * 8u);
          probe[np++] = st;
          probe[np++] = st + 1;
          probe[np++] = st - 1;
        }
        for (int r = 0; r < 16; r++) probe[np++] = rnd() >> (rnd() % 64);
        for (size_t s = 0; s < np; s++) {
          /* The band lookup must agree with a bisection over the whole class (the oracle). */
          uint32_t fast = cp_class_interval(t, c, probe[s]), slow = cp_class_search(t, c, probe[s], 0, c->n);
          if (fast != slow) {
            fprintf(stderr, "band lookup of %llu gives interval %u, bisection %u\n", (unsigned long long)probe[s],
                    fast, slow);
            abort();
          }
          const uint8_t* plans = cp_class_plans(t, c, probe[s]);
          for (uint32_t k = 0; k < t->k; k++) {
            cp_plan p = cp_plan_at(plans + (size_t)k * CP_PLAN_BYTES);
            if (p.algo == CP_NO_PLAN) break;
            if (p.algo >= CP_NUM_ALGOS || p.proto >= CP_NUM_PROTOS) {
              fprintf(stderr, "accepted table has plan %u/%u\n", p.algo, p.proto);
              abort();
            }
            sum += p.algo + p.proto + p.channels + p.chunk;
          }
        }
      }
    }
  }
  return sum;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <table> <iterations> [seed]\n", argv[0]);
    return 2;
  }
  long iters = strtol(argv[2], NULL, 10);
  if (argc > 3) g_rng ^= strtoull(argv[3], NULL, 10) * 0x2545F4914F6CDD1Dull;
  char err[512];
  cp_table* good = cp_table_load(argv[1], err, sizeof err);
  if (good == NULL) {
    fprintf(stderr, "the input table is refused: %s\n", err);
    return 1;
  }
  exercise(good);
  long accepted = 0, refused = 0;
  unsigned long sink = 0;
  for (long i = 0; i < iters; i++) {
    size_t size = good->size;
    uint8_t* d = malloc(size);
    if (d == NULL) return 1;
    memcpy(d, good->data, size);
    mutate(d, &size);
    /* Shrink the allocation to the truncated size so that ASan sees every read past it. */
    uint8_t* exact = malloc(size ? size : 1);
    if (exact == NULL) return 1;
    memcpy(exact, d, size);
    free(d);
    err[0] = '\0';
    cp_table* t = cp_table_parse(exact, size, err, sizeof err);
    if (t == NULL) {
      refused++;
      if (err[0] == '\0') {
        fprintf(stderr, "refused without a reason\n");
        return 1;
      }
      continue;
    }
    accepted++;
    sink += exercise(t);
    cp_table_free(t);
  }
  cp_table_free(good);
  printf("fuzz: %ld mutations, %ld accepted, %ld refused (sink %lu)\n", iters, accepted, refused, sink % 7);
  return 0;
}
