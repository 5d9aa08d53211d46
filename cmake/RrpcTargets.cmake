# Helpers that keep every folder's CMakeLists.txt short.
#
# rrpc_library(NAME DIRS dir... LIBS lib...): a static library of every *.cc in the DIRS except
#   *-test.cc, *-bench.cc and *_main.cc.
# rrpc_tests(DIR LIBS...): one gtest executable and ctest entry per *-test.cc in DIR.

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
  list(FILTER srcs EXCLUDE REGEX "(-test|-bench|_main)\\.cc$")
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>" "$<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/src>")
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
    # Tests that read source files (.proto) find them here, not through __FILE__ (which ccache's
    # base_dir makes relative).
    target_compile_definitions(${test_name} PRIVATE RRPC_SOURCE_DIR="${PROJECT_SOURCE_DIR}/src")
    add_test(NAME ${test_name} COMMAND ${test_name})
    set_tests_properties(${test_name} PROPERTIES TIMEOUT 300)
  endforeach()
endfunction()
