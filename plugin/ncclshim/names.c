/* The commId -> commName map; see names.h. One mutex: it is used at profiler init and finalize and
 * at a communicator's first collective, never per call. */
#define _POSIX_C_SOURCE 200809L
#include "names.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CP_NAME_BUCKETS 1024u

typedef struct cp_name {
  struct cp_name* next;
  uint64_t commId;
  unsigned refs;
  char name[CP_NAME_BYTES];
} cp_name;

static pthread_mutex_t g_namesMu = PTHREAD_MUTEX_INITIALIZER;
static cp_name* g_buckets[CP_NAME_BUCKETS]; /* guarded by g_namesMu */
static unsigned g_count;                    /* guarded by g_namesMu */

static cp_name** bucket(uint64_t commId) {
  uint64_t h = commId * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing: commIds are hashes already */
  return &g_buckets[h >> (64 - 10)];
}

int cp_names_put(uint64_t commId, const char* name) {
  int rc = 0;
  pthread_mutex_lock(&g_namesMu);
  cp_name** b = bucket(commId);
  cp_name* e = *b;
  while (e != NULL && e->commId != commId) e = e->next;
  if (e != NULL) {
    e->refs++;
  } else if (g_count >= CP_NAMES_MAX || (e = calloc(1, sizeof *e)) == NULL) {
    rc = -1;
  } else {
    e->commId = commId;
    e->refs = 1;
    strncpy(e->name, name, CP_NAME_BYTES - 1);
    e->next = *b;
    *b = e;
    g_count++;
  }
  pthread_mutex_unlock(&g_namesMu);
  return rc;
}

void cp_names_drop(uint64_t commId) {
  pthread_mutex_lock(&g_namesMu);
  for (cp_name** pp = bucket(commId); *pp != NULL; pp = &(*pp)->next) {
    cp_name* e = *pp;
    if (e->commId != commId) continue;
    if (--e->refs == 0) {
      *pp = e->next;
      free(e);
      g_count--;
    }
    break;
  }
  pthread_mutex_unlock(&g_namesMu);
}

int cp_names_get(uint64_t commId, char* out, size_t outLen) {
  int found = 0;
  pthread_mutex_lock(&g_namesMu);
  for (cp_name* e = *bucket(commId); e != NULL; e = e->next) {
    if (e->commId == commId) {
      size_t n = strlen(e->name);
      if (n >= outLen) n = outLen - 1;
      memcpy(out, e->name, n);
      out[n] = '\0';
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&g_namesMu);
  return found;
}

/* The library's unload (dlclose, or the process's exit): the entries no profiler finalize dropped
 * (a profiler without COLLPLAN_PROFILE_DIR keeps no context) are freed with it. */
__attribute__((destructor)) static void names_unload(void) {
  pthread_mutex_lock(&g_namesMu);
  for (unsigned b = 0; b < CP_NAME_BUCKETS; b++) {
    while (g_buckets[b] != NULL) {
      cp_name* e = g_buckets[b];
      g_buckets[b] = e->next;
      free(e);
    }
  }
  g_count = 0;
  pthread_mutex_unlock(&g_namesMu);
}
