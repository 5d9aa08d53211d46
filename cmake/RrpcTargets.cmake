# Helpers that keep every folder's CMakeLists.txt short.
#
# rrpc_library(NAME DIRS dir... LIBS lib...): a static library of every *.cc in the DIRS except
#   *-test.cc, *-bench.cc, *-fuzz.cc and *_main.cc.
# rrpc_tests(DIR LIBS...): one gtest executable and ctest entry per *-test.cc in DIR. Every test
#   main (src/util/test_main.cc) exits 77 when a test skipped: ctest reports the entry skipped,
#   and build-support/check-skips.py fails CI on a skip its allow-list does not name.
# rrpc_fuzzers(DIR LIBS...): one fuzz target per *-fuzz.cc in DIR (docs/reliability.md). With
#   -DRRPC_FUZZ=ON (clang) it is a libFuzzer binary; otherwise it links a small driver that runs
#   given inputs once. Either way ctest replays its seed corpus, DIR/fuzz-corpus/NAME/, which
#   also holds every input that once crashed it.

function(rrpc_target_warnings target)
  target_compile_options(${target} PRIVATE ${RRPC_WARNINGS})
endfunction()

function(rrpc_library name)
  cmake_parse_arguments(ARG "" "" "DIRS;LIBS" ${ARGN})
  set(srcs)
  foreach(dir ${ARG_DIRS})
    file(GLOB dir_srcs CONFIGURE_DEPENDS "${dir}/*.cc")
    list(APPEND srcs ${dir_srcs})
  endforeach()
  list(FILTER srcs EXCLUDE REGEX "(-test|-bench|-fuzz|_main)\\.cc$")
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC "$<BUILD_INTERFACE:${RRPC_PUBLIC_INCLUDE_DIR}>"
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>" "$<BUILD_INTERFACE:${RRPC_GENERATED_DIR}>")
  target_link_libraries(${name} PUBLIC ${ARG_LIBS})
  rrpc_target_warnings(${name})
endfunction()

function(rrpc_tests dir)
  if(NOT RRPC_BUILD_TESTS)
    return()
  endif()
  file(GLOB tests CONFIGURE_DEPENDS "${dir}/*-test.cc")
  foreach(test_src ${tests})
    get_filename_component(test_name ${test_src} NAME_WE)
    add_executable(${test_name} ${test_src})
    target_link_libraries(${test_name} PRIVATE ${ARGN} GTest::gmock GTest::gtest rrpc_test_main)
    rrpc_target_warnings(${test_name})
    # Tests that read source files (.proto) find them here (src/ and the public include/), not
    # through __FILE__ (which ccache's base_dir makes relative).
    target_compile_definitions(${test_name} PRIVATE RRPC_SOURCE_DIR="${PROJECT_SOURCE_DIR}/src"
      RRPC_PUBLIC_INCLUDE_DIR="${RRPC_PUBLIC_INCLUDE_DIR}")
    add_test(NAME ${test_name} COMMAND ${test_name})
    set_tests_properties(${test_name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

function(rrpc_fuzzers dir)
  if(NOT RRPC_BUILD_TESTS)
    return()
  endif()
  file(GLOB fuzzers CONFIGURE_DEPENDS "${dir}/*-fuzz.cc")
  foreach(fuzz_src ${fuzzers})
    get_filename_component(fuzz_name ${fuzz_src} NAME_WE)
    add_executable(${fuzz_name} ${fuzz_src})
    target_link_libraries(${fuzz_name} PRIVATE ${ARGN})
    if(RRPC_FUZZ)
      target_link_options(${fuzz_name} PRIVATE -fsanitize=fuzzer)
    else()
      target_link_libraries(${fuzz_name} PRIVATE rrpc_fuzz_main)
    endif()
    rrpc_target_warnings(${fuzz_name})
    set(corpus "${dir}/fuzz-corpus/${fuzz_name}")
    set(replay_args "${corpus}")
    if(RRPC_FUZZ)
      set(replay_args -runs=0 "${corpus}")
    endif()
    add_test(NAME ${fuzz_name}-corpus COMMAND ${fuzz_name} ${replay_args})
    set_tests_properties(${fuzz_name}-corpus PROPERTIES TIMEOUT 300)
    set_property(GLOBAL APPEND PROPERTY RRPC_FUZZ_TARGETS ${fuzz_name})
  endforeach()
endfunction()
