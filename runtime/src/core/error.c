/*
 * error.c - the per-thread error message (SQLite's errmsg pattern).
 * Functions report failure by status code; the text lives here until the
 * next failure on the same thread.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char        last_error[1024];
static _Thread_local tide_status last_status;

const char * tide_last_error(void) { return last_error; }
tide_status  tide_last_status(void) { return last_status; }

/* The message may be made from the last one (tide_error_set(st, "%s: %s",
 * op, tide_last_error()), as callers do to add context): it is formatted
 * apart, then copied in. Written in place, the message came out empty. */
tide_status tide_error_set(tide_status st, const char * fmt, ...) {
    char    msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return last_status = st;
}
