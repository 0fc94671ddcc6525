// Package shm is the shared-memory transport (NCCL's src/transport/shm.cc): a
// transport.Transport whose regions are files of ShmDir (/dev/shm, or COLLPLAN_SHM_DIR) mapped
// by every rank process of a job, the job's lock file that keeps them while some process of the
// job holds it (JobLock), the removal of stale jobs' files, and a launcher's abort of a job
// through its control region (AbortShm).
package shm
