/*
 * error.c - the per-thread error message (SQLite's errmsg pattern).
 * Functions report failure by status code; the text lives here until the
 * next failure on the same thread.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char        last_error[1024];
static _Thread_local tide_status last_status;

const char * tide_last_error(void) { return last_error; }
tide_status  tide_last_status(void) { return last_status; }

tide_status tide_error_set(tide_status st, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return last_status = st;
}
