/*
 * Reader for the compiled collplan tuner table (docs/tuner-table.md, version 1).
 *
 * cp_table_load reads the whole file into memory, validates every offset, count and value the
 * format's Validation section names, and returns an immutable table. Lookups read the raw bytes
 * with explicit little-endian loads, so no pointer from the file is ever dereferenced unchecked.
 */
#ifndef COLLPLAN_CPTABLE_H
#define COLLPLAN_CPTABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CP_MAGIC "CPLNTUNE"
#define CP_VERSION 1u
#define CP_HEADER_BYTES 64u
#define CP_BLOCK_ENTRY_BYTES 32u
#define CP_CLASS_ENTRY_BYTES 16u
#define CP_PLAN_BYTES 8u
#define CP_MAX_K 8u
#define CP_NUM_COLLS 5u
#define CP_NUM_ALGOS 7u
#define CP_NUM_PROTOS 3u
#define CP_NO_PLAN 0xFFu
#define CP_NUM_CONSTANTS 144u
#define CP_FLAG_CONSTANTS 1u
#define CP_FLAG_NAMED 2u       /* a named-communicator section follows the block directory */
#define CP_NAMED_ENTRY_BYTES 72u /* char[64] pattern (NUL-terminated), u32 block, u32 reserved */
#define CP_NAMED_PATTERN 64u
#define CP_FLAG_RELEASE 4u /* an 8-byte release record follows (after the named section, if any) */
#define CP_MAX_SHARING 64u /* directory/array bytes read at validation <= 64 x file size */
#define CP_MAX_FILE_BYTES (256u << 20) /* refuse absurd files before allocating */

#define CP_BANDS 66u /* bit lengths 0..64 of nBytes, and one past */

/* One class directory entry, decoded (offsets already validated against the file). */
typedef struct {
  uint32_t n;          /* interval count, >= 1 */
  uint32_t startsOff;  /* N x u64 */
  uint32_t plansOff;   /* N x K x 8 bytes */
  /* band[b] (b = 0..64): the interval holding the smallest size of bit length b (0 for b = 0,
   * 2^(b-1) otherwise); band[65] = n - 1. A size of bit length b lies in [band[b], band[b+1]]. */
  const uint32_t* band;
} cp_class;

typedef struct {
  uint32_t nNodes, nRanks;
  uint32_t p0, p1; /* numPipeOps range, p0 <= p1 */
  uint32_t nNvlDomains, minRanksPerNvlDomain, maxRanksPerNvlDomain;
  const cp_class* classes; /* 5 x (p1-p0+1), index coll*(p1-p0+1) + (pipeOps-p0) */
} cp_block;

/* A named-communicator entry: communicators whose commName matches pattern (fnmatch, FNM_PATHNAME)
 * and whose shape is block's use that block instead of their shape's first. */
typedef struct {
  const char* pattern; /* NUL-terminated inside the file's data */
  uint32_t block;
} cp_named;

typedef struct {
  uint8_t* data; /* the whole file */
  size_t size;
  uint64_t checksum; /* header field, equal to the computed one */
  uint32_t k;
  uint32_t nBlocks;
  cp_block* blocks;
  cp_class* classes; /* backing store of every block's classes */
  uint32_t* bands;   /* backing store of the classes' band indexes, CP_BANDS each */
  int hasConstants;
  double constants[CP_NUM_CONSTANTS];
  char node[17];
  uint32_t nNamed;
  cp_named* named; /* nNamed entries, in file order */
  char release[24]; /* the NCCL release whose model priced the table ("2.28.3", "master"), or "" */
} cp_table;

/* One decoded plan slot. */
typedef struct {
  unsigned algo, proto, channels;
  uint32_t chunk;
} cp_plan;

/* Loads and validates path. On failure returns NULL and writes a one-line reason to err. */
cp_table* cp_table_load(const char* path, char* err, size_t errLen);
/* Reads and validates an open regular file (from offset 0, whatever the file position). */
cp_table* cp_table_read_fd(int fd, char* err, size_t errLen);
/* Validates an in-memory file; takes ownership of data (freed on failure too). */
cp_table* cp_table_parse(uint8_t* data, size_t size, char* err, size_t errLen);
void cp_table_free(cp_table* t);
/* The first block with exactly (nNodes, nRanks), or NULL. */
const cp_block* cp_table_find_block(const cp_table* t, uint64_t nNodes, uint64_t nRanks);
/* The checksum covers everything after its own field: bytes [32, file bytes). */
#define CP_CHECKSUM_FROM 32
uint64_t cp_fnv1a64(const uint8_t* p, size_t n);

static inline uint64_t cp_le64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static inline uint32_t cp_le32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

static inline cp_plan cp_plan_at(const uint8_t* p) {
  cp_plan pl;
  pl.algo = p[0];
  pl.proto = p[1];
  pl.channels = (unsigned)p[2] | ((unsigned)p[3] << 8);
  pl.chunk = cp_le32(p + 4);
  return pl;
}

/* The class of (coll, pipeOps) in block b, or NULL when either is outside the block's range. */
static inline const cp_class* cp_block_class(const cp_block* b, unsigned coll, int pipeOps) {
  if (coll >= CP_NUM_COLLS || pipeOps < 0 || (uint32_t)pipeOps < b->p0 || (uint32_t)pipeOps > b->p1) return NULL;
  uint32_t span = b->p1 - b->p0 + 1;
  return &b->classes[(size_t)coll * span + ((uint32_t)pipeOps - b->p0)];
}

/* The interval of c holding nBytes, searched in [lo, lo+n): the last i with start[i] <= nBytes,
 * given start[lo] <= nBytes. */
static inline uint32_t cp_class_search(const cp_table* t, const cp_class* c, uint64_t nBytes, uint32_t lo,
                                       uint32_t n) {
  const uint8_t* starts = t->data + c->startsOff;
  while (n > 1) {
    uint32_t half = n / 2;
    if (cp_le64(starts + (size_t)(lo + half) * 8u) <= nBytes) lo += half;
    n -= half;
  }
  return lo;
}

/* The interval holding nBytes: the last i with start[i] <= nBytes. The band of nBytes's bit
 * length narrows it to one or two intervals in a table of power-of-two-like bands; a wider band
 * (many starts between two powers of two) is searched by bisection. */
static inline uint32_t cp_class_interval(const cp_table* t, const cp_class* c, uint64_t nBytes) {
  unsigned b = nBytes ? 64u - (unsigned)__builtin_clzll(nBytes) : 0u;
  uint32_t lo = c->band[b], hi = c->band[b + 1];
  if (hi - lo > 4) return cp_class_search(t, c, nBytes, lo, hi - lo + 1);
  const uint8_t* starts = t->data + c->startsOff;
  while (lo < hi && cp_le64(starts + (size_t)(lo + 1) * 8u) <= nBytes) lo++;
  return lo;
}

/* The K plan slots (K*8 bytes) of the interval holding nBytes. */
static inline const uint8_t* cp_class_plans(const cp_table* t, const cp_class* c, uint64_t nBytes) {
  return t->data + c->plansOff + (size_t)cp_class_interval(t, c, nBytes) * t->k * CP_PLAN_BYTES;
}

#endif
