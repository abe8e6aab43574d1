# deepbox_test_code(TARGET...): code that only tests, benchmarks or fuzz
# targets run (test binaries, fakes, fixtures) gets DEEPBOX_TEST_CODE_FLAGS
# after the build type's flags. The dev preset sets -O0 there, and the test
# code compiles in about half the CPU time. The product stays at -O1 under the
# sanitizers: with an -O0 ASan daemon in a 64 MiB sandbox, the kernel's OOM
# killer chose the daemon, not the workload the memory-limit tests grow.
set(DEEPBOX_TEST_CODE_FLAGS "" CACHE STRING "Extra compile flags of test-only code")
# It also marks them test-only (Bazel's `testonly`): deepbox_check_product_links
# refuses a product that links one. Without the test suite they are left out
# of `all`: a benchmark or fuzz target that links one still builds it, a
# product-only build (ci-release's product, a packager's) builds none.
function(deepbox_test_code)
  separate_arguments(flags UNIX_COMMAND "${DEEPBOX_TEST_CODE_FLAGS}")
  foreach(t ${ARGN})
    set_target_properties(${t} PROPERTIES DEEPBOX_TEST_ONLY ON)
    if(NOT DEEPBOX_BUILD_TESTS)
      set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL ON)
    endif()
    if(flags)
      target_compile_options(${t} PRIVATE ${flags})
    endif()
  endforeach()
endfunction()

# deepbox_check_product_links(TARGET...): fails the configure when a shipped
# target links, directly or through any library, a target marked test-only
# (a fake API server, a fake model, a hostile daemon in the product).
function(deepbox_check_product_links)
  foreach(product ${ARGN})
    set(seen "")
    set(queue ${product})
    set(via_${product} "${product}")
    while(queue)
      list(POP_FRONT queue t)
      if(t IN_LIST seen OR NOT TARGET ${t})
        continue()
      endif()
      list(APPEND seen ${t})
      get_target_property(test_only ${t} DEEPBOX_TEST_ONLY)
      if(test_only)
        message(FATAL_ERROR "${product} links the test-only target ${t} (${via_${t}}): "
                            "test code must not ship")
      endif()
      get_target_property(type ${t} TYPE)
      set(links "")
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(direct ${t} LINK_LIBRARIES)
        if(direct)
          list(APPEND links ${direct})
        endif()
      endif()
      get_target_property(interface ${t} INTERFACE_LINK_LIBRARIES)
      if(interface)
        list(APPEND links ${interface})
      endif()
      foreach(lib ${links})
        # $<LINK_ONLY:x> and friends: the target named inside.
        string(REGEX REPLACE "^\\$<[A-Z_]+:(.*)>$" "\\1" lib "${lib}")
        if(TARGET ${lib} AND NOT lib IN_LIST seen)
          list(APPEND queue ${lib})
          if(NOT DEFINED via_${lib})
            set(via_${lib} "${via_${t}} -> ${lib}")
          endif()
        endif()
      endforeach()
    endwhile()
  endforeach()
endfunction()

# deepbox_test(NAME SOURCES a.cc b.cc LIBS lib1 lib2 [LABELS l1 l2])
# One GoogleTest binary, registered with CTest test-by-test.
# The test-naming rule (docs/architecture.md "Tests"): a test executable is
# named after the component folder it lives in, then what it tests —
# src/local/cgroups_test.cc is local_cgroups_test, tests/escape/... is
# escape_..._test — so a ctest name (target.Suite.Case) says where the test
# is. Configure fails on a name that breaks it.
function(deepbox_check_test_name name)
  file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  string(REGEX MATCH "^(src|tests)/([^/]+)" _ "${rel}")
  if(NOT CMAKE_MATCH_2)
    return()
  endif()
  set(component "${CMAKE_MATCH_2}")
  if(NOT name MATCHES "^${component}_([a-z0-9_]+_)?test$")
    message(FATAL_ERROR "test '${name}' in ${rel}: name it ${component}_<what>_test "
                        "(the test-naming rule, docs/architecture.md)")
  endif()
endfunction()

function(deepbox_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  deepbox_check_test_name(${name})
  if(NOT DEEPBOX_BUILD_TESTS AND NOT (DEEPBOX_BUILD_HARDENING_TEST AND name STREQUAL "hardening_test"))
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  deepbox_test_code(${name})
  if(NOT DEEPBOX_BUILD_TESTS)
    # The hardening test alone (ci-release): built by default, as the one
    # test of that build (deepbox_test_code left it out of `all`).
    set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL OFF)
  endif()
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    DEEPBOX_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
    DEEPBOX_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 TEST_PREFIX "${name}."
    PROPERTIES TIMEOUT 300)
  # Labels are set by a script CTest reads after the discovered tests: through
  # gtest_discover_tests' PROPERTIES a list ("unit;mcp") is split into LABELS
  # unit and a property named mcp, and the second label is lost. The
  # discovery script leaves the tests' names in ${name}_TESTS.
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake")
  # Every test requires deepbox_host_clean: the leftover check runs after all
  # of them (tests/CMakeLists.txt).
  file(WRITE "${labels_file}"
    "if(${name}_TESTS)\n"
    "  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${T_LABELS}\"\n"
    "                       FIXTURES_REQUIRED deepbox_host_clean)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
endfunction()
