// RRPC_FUZZ_CHECK(cond): a fuzz target's assertion (*-fuzz.cc). Aborts with the failed condition,
// in every build type, so libFuzzer (or the replay driver, fuzz_main.cc) reports the input.
#pragma once

#include <cstdio>
#include <cstdlib>

#define RRPC_FUZZ_CHECK(cond)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)
