# deepbox_test(NAME SOURCES a.cc b.cc LIBS lib1 lib2 [LABELS l1 l2])
# One GoogleTest binary, registered with CTest test-by-test.
function(deepbox_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT DEEPBOX_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    DEEPBOX_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
    DEEPBOX_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 TEST_PREFIX "${name}."
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT 300)
endfunction()
