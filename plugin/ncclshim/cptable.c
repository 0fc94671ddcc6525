/* Reader and validator for the compiled collplan tuner table; see cptable.h. */
#define _POSIX_C_SOURCE 200809L
#include "cptable.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static void fail(char* err, size_t errLen, const char* fmt, ...) {
  if (err == NULL || errLen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errLen, fmt, ap);
  va_end(ap);
}

uint64_t cp_fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* NCCL's example tuner reads CSV lines "collective,minbytes,maxbytes,algorithm,..." with '#'
 * comments. A file whose first meaningful line starts that way is one, not a collplan table. */
static int looks_like_nccl_csv(const uint8_t* d, size_t n) {
  static const char* const colls[] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
  size_t i = 0;
  if (n >= 3 && d[0] == 0xEF && d[1] == 0xBB && d[2] == 0xBF) i = 3; /* UTF-8 BOM */
  for (;;) {
    while (i < n && (d[i] == ' ' || d[i] == '\t' || d[i] == '\r' || d[i] == '\n')) i++;
    if (i >= n) return 0;
    if (d[i] != '#') break;
    while (i < n && d[i] != '\n') i++; /* comment line */
  }
  size_t j = i;
  while (j < n && j - i < 16 && isalpha(d[j])) j++;
  size_t len = j - i;
  /* the token must be followed by a comma, possibly after blanks */
  size_t k = j;
  while (k < n && (d[k] == ' ' || d[k] == '\t')) k++;
  if (k >= n || d[k] != ',') return 0;
  for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++) {
    if (strlen(colls[c]) == len && strncasecmp((const char*)d + i, colls[c], len) == 0) return 1;
  }
  return 0;
}

/* [off, off+len) inside the data area [64, size), with len computed in 64 bits by the caller. */
static int in_file(uint64_t off, uint64_t len, size_t size) {
  return off >= CP_HEADER_BYTES && off <= size && len <= size - off;
}

cp_table* cp_table_parse(uint8_t* d, size_t size, char* err, size_t errLen) {
  cp_table* t = NULL;
  if (size < sizeof(CP_MAGIC) - 1 || memcmp(d, CP_MAGIC, sizeof(CP_MAGIC) - 1) != 0) {
    if (looks_like_nccl_csv(d, size))
      fail(err, errLen, "this is an NCCL example-tuner CSV (NCCL_TUNER_CONFIG_FILE rules), not a collplan table "
                        "(compile one with `planner compile`)");
    else if (size < CP_HEADER_BYTES)
      fail(err, errLen, "file too short for the header (%zu bytes, need %u)", size, CP_HEADER_BYTES);
    else
      fail(err, errLen, "bad magic: not a collplan table (want \"%s\")", CP_MAGIC);
    goto bad;
  }
  if (size < CP_HEADER_BYTES) {
    fail(err, errLen, "file too short for the header (%zu bytes, need %u): truncated", size, CP_HEADER_BYTES);
    goto bad;
  }
  uint32_t version = cp_le32(d + 8);
  if (version != CP_VERSION) {
    fail(err, errLen, "unsupported version %u (this shim reads version %u)", version, CP_VERSION);
    goto bad;
  }
  uint32_t headerBytes = cp_le32(d + 12);
  if (headerBytes != CP_HEADER_BYTES) {
    fail(err, errLen, "header bytes %u, want %u", headerBytes, CP_HEADER_BYTES);
    goto bad;
  }
  uint64_t fileBytes = cp_le64(d + 16);
  if (fileBytes != (uint64_t)size) {
    fail(err, errLen, "file size mismatch: header says %llu bytes, file has %zu (%s)", (unsigned long long)fileBytes,
         size, fileBytes > (uint64_t)size ? "truncated" : "trailing bytes");
    goto bad;
  }
  uint64_t want = cp_le64(d + 24);
  uint64_t got = cp_fnv1a64(d + CP_CHECKSUM_FROM, size - CP_CHECKSUM_FROM);
  if (want != got) {
    fail(err, errLen, "checksum mismatch: header %016llx, computed %016llx", (unsigned long long)want,
         (unsigned long long)got);
    goto bad;
  }
  uint32_t nBlocks = cp_le32(d + 32), k = cp_le32(d + 36), flags = cp_le32(d + 40), constOff = cp_le32(d + 44);
  if (k < 1 || k > CP_MAX_K) {
    fail(err, errLen, "ranked plans per interval K=%u out of range 1..%u", k, CP_MAX_K);
    goto bad;
  }
  if (flags & ~(CP_FLAG_CONSTANTS | CP_FLAG_NAMED | CP_FLAG_RELEASE)) {
    fail(err, errLen, "unknown flags 0x%x", flags);
    goto bad;
  }
  if (!in_file(CP_HEADER_BYTES, (uint64_t)nBlocks * CP_BLOCK_ENTRY_BYTES, size)) {
    fail(err, errLen, "block directory (%u blocks) points outside the file", nBlocks);
    goto bad;
  }

  t = calloc(1, sizeof *t);
  if (t == NULL) {
    fail(err, errLen, "out of memory");
    goto bad;
  }
  uint64_t ext = CP_HEADER_BYTES + (uint64_t)nBlocks * CP_BLOCK_ENTRY_BYTES; /* optional sections */
  if (flags & CP_FLAG_NAMED) {
    uint64_t off = ext;
    if (!in_file(off, 8, size)) {
      fail(err, errLen, "named-communicator section points outside the file");
      goto bad;
    }
    uint32_t n = cp_le32(d + off), reserved = cp_le32(d + off + 4);
    if (n == 0 || reserved != 0 || !in_file(off + 8, (uint64_t)n * CP_NAMED_ENTRY_BYTES, size)) {
      fail(err, errLen, "named-communicator section: %u entries (reserved %u) do not fit the file", n, reserved);
      goto bad;
    }
    t->named = calloc(n, sizeof *t->named);
    if (t->named == NULL) {
      fail(err, errLen, "out of memory");
      goto bad;
    }
    for (uint32_t i = 0; i < n; i++) {
      const uint8_t* e = d + off + 8 + (size_t)i * CP_NAMED_ENTRY_BYTES;
      uint32_t blk = cp_le32(e + CP_NAMED_PATTERN), res = cp_le32(e + CP_NAMED_PATTERN + 4);
      if (e[0] == 0 || memchr(e, 0, CP_NAMED_PATTERN) == NULL) {
        fail(err, errLen, "named-communicator entry %u: pattern empty or not NUL-terminated in %u bytes", i,
             CP_NAMED_PATTERN);
        goto bad;
      }
      if (blk >= nBlocks || res != 0) {
        fail(err, errLen, "named-communicator entry %u: block %u of %u (reserved %u)", i, blk, nBlocks, res);
        goto bad;
      }
      t->named[i].pattern = (const char*)e;
      t->named[i].block = blk;
    }
    t->nNamed = n;
    ext = off + 8 + (uint64_t)n * CP_NAMED_ENTRY_BYTES;
  }
  if (flags & CP_FLAG_RELEASE) {
    if (!in_file(ext, 8, size) || cp_le32(d + ext + 4) != 0) {
      fail(err, errLen, "release record points outside the file or its reserved field is set");
      goto bad;
    }
    uint32_t code = cp_le32(d + ext);
    unsigned major = (code >> 16) & 0x7FFFu, minor = (code >> 8) & 0xFFu, patch = code & 0xFFu;
    if (major != 2 || minor < 19 || minor > 30) {
      fail(err, errLen, "release record 0x%x: NCCL %u.%u.%u is not a release collplan models (2.19 .. 2.30)", code,
           major, minor, patch);
      goto bad;
    }
    if (code >> 31)
      snprintf(t->release, sizeof t->release, "master");
    else
      snprintf(t->release, sizeof t->release, "%u.%u.%u", major, minor, patch);
  }
  t->data = d;
  t->size = size;
  t->checksum = want;
  t->k = k;
  t->nBlocks = nBlocks;
  memcpy(t->node, d + 48, 16);
  t->node[16] = '\0';
  for (size_t i = 0; i < 16 && t->node[i]; i++)
    if (!isprint((unsigned char)t->node[i])) t->node[i] = '?';

  if (flags & CP_FLAG_CONSTANTS) {
    if (!in_file(constOff, (uint64_t)CP_NUM_CONSTANTS * 8u, size)) {
      fail(err, errLen, "constants offset %u points outside the file", constOff);
      goto bad;
    }
    for (uint32_t i = 0; i < CP_NUM_CONSTANTS; i++) {
      uint64_t bits = cp_le64(d + constOff + (size_t)i * 8u);
      double v;
      memcpy(&v, &bits, sizeof v);
      if (!isfinite(v) || v < 0) {
        fail(err, errLen, "constant %u is %g: want a finite value >= 0", i, v);
        goto bad;
      }
      t->constants[i] = v;
    }
    t->hasConstants = 1;
  } else if (constOff != 0) {
    fail(err, errLen, "constants offset %u set but flags say no constants block", constOff);
    goto bad;
  }

  /* Count the class entries first (bounded by the file size, since each one is 16 file bytes). */
  uint64_t nClasses = 0;
  for (uint32_t b = 0; b < nBlocks; b++) {
    const uint8_t* e = d + CP_HEADER_BYTES + (size_t)b * CP_BLOCK_ENTRY_BYTES;
    uint32_t p0 = cp_le32(e + 8), p1 = cp_le32(e + 12), dirOff = cp_le32(e + 16);
    if (p0 < 1 || p1 < p0) {
      fail(err, errLen, "block %u: numPipeOps range %u..%u is empty or starts below 1", b, p0, p1);
      goto bad;
    }
    uint64_t span = (uint64_t)p1 - p0 + 1;
    if (!in_file(dirOff, CP_NUM_COLLS * span * CP_CLASS_ENTRY_BYTES, size)) {
      fail(err, errLen, "block %u: class directory offset %u (%llu entries) points outside the file", b, dirOff,
           (unsigned long long)(CP_NUM_COLLS * span));
      goto bad;
    }
    nClasses += CP_NUM_COLLS * span;
  }
  /* Directories and arrays may be shared, but not so often that validating them costs far more
   * than the file's size (a crafted file could otherwise make init quadratic). */
  const uint64_t budget = (uint64_t)size * CP_MAX_SHARING;
  if (nClasses * CP_CLASS_ENTRY_BYTES > budget) {
    fail(err, errLen, "class directories shared too often (%llu entries in a %zu-byte file)",
         (unsigned long long)nClasses, size);
    goto bad;
  }
  uint64_t scanned = 0;
  t->blocks = calloc(nBlocks ? nBlocks : 1, sizeof *t->blocks);
  t->classes = calloc(nClasses ? (size_t)nClasses : 1, sizeof *t->classes);
  t->bands = calloc(nClasses ? (size_t)nClasses * CP_BANDS : 1, sizeof *t->bands);
  if (t->blocks == NULL || t->classes == NULL || t->bands == NULL) {
    fail(err, errLen, "out of memory");
    goto bad;
  }

  cp_class* next = t->classes;
  for (uint32_t b = 0; b < nBlocks; b++) {
    const uint8_t* e = d + CP_HEADER_BYTES + (size_t)b * CP_BLOCK_ENTRY_BYTES;
    cp_block* blk = &t->blocks[b];
    blk->nNodes = cp_le32(e + 0);
    blk->nRanks = cp_le32(e + 4);
    blk->p0 = cp_le32(e + 8);
    blk->p1 = cp_le32(e + 12);
    uint32_t dirOff = cp_le32(e + 16);
    blk->nNvlDomains = cp_le32(e + 20);
    blk->minRanksPerNvlDomain = cp_le32(e + 24);
    blk->maxRanksPerNvlDomain = cp_le32(e + 28);
    blk->classes = next;
    uint64_t entries = CP_NUM_COLLS * ((uint64_t)blk->p1 - blk->p0 + 1);
    for (uint64_t ci = 0; ci < entries; ci++) {
      const uint8_t* ce = d + dirOff + ci * CP_CLASS_ENTRY_BYTES;
      cp_class* c = next++;
      c->n = cp_le32(ce + 0);
      c->startsOff = cp_le32(ce + 4);
      c->plansOff = cp_le32(ce + 8);
      uint32_t reserved = cp_le32(ce + 12);
      unsigned coll = (unsigned)(ci / (entries / CP_NUM_COLLS));
      unsigned pipe = blk->p0 + (unsigned)(ci % (entries / CP_NUM_COLLS));
      if (c->n < 1) {
        fail(err, errLen, "block %u coll %u pipeOps %u: interval count 0", b, coll, pipe);
        goto bad;
      }
      if (reserved != 0) {
        fail(err, errLen, "block %u coll %u pipeOps %u: reserved field is %u, want 0", b, coll, pipe, reserved);
        goto bad;
      }
      if ((c->startsOff & 7u) || (c->plansOff & 7u)) {
        fail(err, errLen, "block %u coll %u pipeOps %u: starts/plans offset %u/%u not 8-byte aligned", b, coll, pipe,
             c->startsOff, c->plansOff);
        goto bad;
      }
      if (!in_file(c->startsOff, (uint64_t)c->n * 8u, size)) {
        fail(err, errLen, "block %u coll %u pipeOps %u: starts offset %u (%u intervals) points outside the file", b,
             coll, pipe, c->startsOff, c->n);
        goto bad;
      }
      if (!in_file(c->plansOff, (uint64_t)c->n * k * CP_PLAN_BYTES, size)) {
        fail(err, errLen, "block %u coll %u pipeOps %u: plans offset %u (%u x %u plans) points outside the file", b,
             coll, pipe, c->plansOff, c->n, k);
        goto bad;
      }
      scanned += (uint64_t)c->n * 8u * (1u + k);
      if (scanned > budget) {
        fail(err, errLen, "starts/plans arrays shared too often (more than %u times the file size)", CP_MAX_SHARING);
        goto bad;
      }
      const uint8_t* starts = d + c->startsOff;
      if (cp_le64(starts) != 0) {
        fail(err, errLen, "block %u coll %u pipeOps %u: starts do not begin at 0", b, coll, pipe);
        goto bad;
      }
      for (uint32_t i = 1; i < c->n; i++) {
        if (cp_le64(starts + (size_t)i * 8u) <= cp_le64(starts + (size_t)(i - 1) * 8u)) {
          fail(err, errLen, "block %u coll %u pipeOps %u: starts not strictly increasing at interval %u", b, coll,
               pipe, i);
          goto bad;
        }
      }
      for (uint32_t i = 0; i < c->n; i++) {
        int ended = 0;
        for (uint32_t s = 0; s < k; s++) {
          cp_plan p = cp_plan_at(d + c->plansOff + ((size_t)i * k + s) * CP_PLAN_BYTES);
          if (p.algo == CP_NO_PLAN) {
            ended = 1;
            continue;
          }
          if (ended) {
            fail(err, errLen, "block %u coll %u pipeOps %u interval %u: plan in slot %u after an empty slot", b, coll,
                 pipe, i, s);
            goto bad;
          }
          if (p.algo >= CP_NUM_ALGOS || p.proto >= CP_NUM_PROTOS) {
            fail(err, errLen,
                 "block %u coll %u pipeOps %u interval %u slot %u: algorithm %u / protocol %u out of range", b, coll,
                 pipe, i, s, p.algo, p.proto);
            goto bad;
          }
        }
      }
      /* The band index (cptable.h), from the bisection over the whole class. */
      uint32_t* band = t->bands + (size_t)(c - t->classes) * CP_BANDS;
      for (unsigned bl = 0; bl < CP_BANDS - 1; bl++)
        band[bl] = cp_class_search(t, c, bl == 0 ? 0 : 1ull << (bl - 1), 0, c->n);
      band[CP_BANDS - 1] = c->n - 1;
      c->band = band;
    }
  }
  return t;

bad:
  if (t != NULL) {
    t->data = NULL; /* freed below */
    cp_table_free(t);
  }
  free(d);
  return NULL;
}

cp_table* cp_table_read_fd(int fd, char* err, size_t errLen) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    fail(err, errLen, "cannot stat: %s", strerror(errno));
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    fail(err, errLen, "not a regular file");
    return NULL;
  }
  if (st.st_size < 0 || (uint64_t)st.st_size > CP_MAX_FILE_BYTES) {
    fail(err, errLen, "file too large (%lld bytes, limit %u)", (long long)st.st_size, CP_MAX_FILE_BYTES);
    return NULL;
  }
  size_t size = (size_t)st.st_size;
  uint8_t* d = malloc(size ? size : 1);
  if (d == NULL) {
    fail(err, errLen, "out of memory reading %zu bytes", size);
    return NULL;
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = pread(fd, d + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      fail(err, errLen, "read error: %s", strerror(errno));
      free(d);
      return NULL;
    }
    if (r == 0) break; /* shrank while reading: the size check names it */
    got += (size_t)r;
  }
  return cp_table_parse(d, got, err, errLen);
}

cp_table* cp_table_load(const char* path, char* err, size_t errLen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    fail(err, errLen, "cannot open: %s", strerror(errno));
    return NULL;
  }
  cp_table* t = cp_table_read_fd(fd, err, errLen);
  close(fd);
  return t;
}

void cp_table_free(cp_table* t) {
  if (t == NULL) return;
  free(t->data);
  free(t->blocks);
  free(t->classes);
  free(t->bands);
  free(t->named);
  free(t);
}

const cp_block* cp_table_find_block(const cp_table* t, uint64_t nNodes, uint64_t nRanks) {
  for (uint32_t b = 0; b < t->nBlocks; b++) {
    if (t->blocks[b].nNodes == nNodes && t->blocks[b].nRanks == nRanks) return &t->blocks[b];
  }
  return NULL;
}
