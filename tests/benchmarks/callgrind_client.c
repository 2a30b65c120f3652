/* Callgrind client requests for the icount harness (icount.py loads this with ctypes).
 * Each function is a no-op when the process does not run under valgrind. */
#include <valgrind/callgrind.h>

int yt_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
void yt_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void yt_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void yt_zero(void) { CALLGRIND_ZERO_STATS; }
void yt_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
