/* hzstat_heap.h - hzstat --heap: the live heap profile of a process. */
#ifndef HZSTAT_HEAP_H
#define HZSTAT_HEAP_H

/* Report the profile segment open as fd (include/hakozuna_prof.h) of process pid:
 * the top `top` sites by estimated live bytes on stdout, or, with output non-NULL,
 * a gperftools heap profile written to that file ("-": stdout).  Returns hzstat's
 * exit status; fd stays open. */
int hzstat_heap(int fd, const char *path, long pid, long top, const char *output);

#endif /* HZSTAT_HEAP_H */
