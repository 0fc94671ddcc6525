/*
 * The process's commId -> commName map, shared by the profiler (which learns the name at its init)
 * and the tuner (which needs it for the table's named-communicator rules, docs/tuner-rules.md).
 * NCCL's tuner init gets no commName; its profiler init does, after the tuner's init and before
 * the communicator's first collective.
 */
#ifndef COLLPLAN_NAMES_H
#define COLLPLAN_NAMES_H

#include <stddef.h>
#include <stdint.h>

#define CP_NAMES_MAX 16384u /* entries at most: memory stays bounded whatever the job does */
#define CP_NAME_BYTES 128u  /* longer names are cut (and then match no pattern longer than that) */

/* Records commId's name (one reference per call: every rank's profiler init of the communicator).
 * Returns 0, or -1 when the map is full (the name is then unknown to the tuner). */
int cp_names_put(uint64_t commId, const char* name);
/* Drops one reference (the profiler's finalize). */
void cp_names_drop(uint64_t commId);
/* Copies commId's name into out (NUL-terminated) and returns 1, or returns 0 when not known. */
int cp_names_get(uint64_t commId, char* out, size_t outLen);

#endif
