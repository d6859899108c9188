/* check.h - a minimal assertion harness for the C tests: CHECK prints the
 * failing expression and location and counts failures; main returns the count. */
#ifndef TIDE_TEST_CHECK_H
#define TIDE_TEST_CHECK_H
#include <stdio.h>
static int check_failures;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)
#define CHECK_MSG(expected)                                                          \
    do {                                                                             \
        if (strcmp(tide_last_error(), expected) != 0) {                              \
            fprintf(stderr, "%s:%d: message '%s' ~= '%s'\n", __FILE__, __LINE__,     \
                    tide_last_error(), expected);                                    \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)
#endif
