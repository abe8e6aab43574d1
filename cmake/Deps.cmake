# Every dependency is a Debian 12 package installed by scripts/install-deps.sh.
find_package(Threads REQUIRED)
# Every sandbox start execs two binaries: `deepbox` (its supervisor) and
# deepbox-sandboxd (its daemon). Each shared library costs a process start its
# mapping, relocations and symbol lookups (bench/local/README.md), so release
# builds link libseccomp, nghttp2, RE2, yaml-cpp, libedit, Boost.JSON, fmt and
# the C++ runtime in. The price: a fix to one of them needs a rebuild, not only
# the distribution's update; OFF for a distribution package. OpenSSL stays
# shared unless asked for (DEEPBOX_STATIC_OPENSSL): it parses what sandboxes
# send through the secrets proxy, and its advisories must reach deepbox with
# `apt upgrade`.
if(CMAKE_BUILD_TYPE STREQUAL "Release" AND NOT DEEPBOX_SANITIZE AND NOT DEEPBOX_FUZZ)
  set(deepbox_static_deps_default ON)
else()
  set(deepbox_static_deps_default OFF)
endif()
option(DEEPBOX_STATIC_DEPS
       "Link libseccomp, nghttp2, RE2, yaml-cpp, libedit, Boost.JSON, fmt and libstdc++ statically (faster process start)"
       ${deepbox_static_deps_default})
# Shared, it is dlopen()ed on first use (src/net/openssl_loader.h), so no
# process start pays for it.
option(DEEPBOX_STATIC_OPENSSL
       "Link OpenSSL statically too (instead of dlopen()ing libssl.so.3 on first use; its security fixes then need a rebuild)"
       OFF)
if(DEEPBOX_STATIC_OPENSSL)
  set(OPENSSL_USE_STATIC_LIBS TRUE)
endif()
# FindOpenSSL keeps what an earlier configure found: look again when the kind changed.
foreach(var OPENSSL_CRYPTO_LIBRARY OPENSSL_SSL_LIBRARY)
  if(DEFINED CACHE{${var}})
    set(deepbox_found_archive OFF)
    if("${${var}}" MATCHES "\\.a$")
      set(deepbox_found_archive ON)
    endif()
    if(NOT deepbox_found_archive STREQUAL DEEPBOX_STATIC_OPENSSL)
      unset(${var} CACHE)
    endif()
  endif()
endforeach()
if(DEEPBOX_STATIC_DEPS)
  set(Boost_USE_STATIC_LIBS ON)  # Boost's CONFIG files then pick the .a variants
endif()
find_package(Boost 1.81 REQUIRED CONFIG COMPONENTS json url)  # no EXACT: 1.81 vs 1.81.0
find_package(OpenSSL REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
# deepbox::fmt is what every target links: the shared libfmt, or (static
# builds) its compiled part built here, since Debian ships no libfmt.a.
add_library(deepbox_fmt INTERFACE)
add_library(deepbox::fmt ALIAS deepbox_fmt)
if(DEEPBOX_STATIC_DEPS)
  add_library(deepbox_fmt_compiled STATIC ${PROJECT_SOURCE_DIR}/cmake/fmt_compiled.cc)
  get_target_property(deepbox_fmt_includes fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(deepbox_fmt_compiled SYSTEM PUBLIC ${deepbox_fmt_includes})
  target_link_libraries(deepbox_fmt INTERFACE deepbox_fmt_compiled)
else()
  target_link_libraries(deepbox_fmt INTERFACE fmt::fmt)
endif()
find_package(CLI11 REQUIRED)
find_package(tl-expected REQUIRED)
find_package(utf8cpp REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET re2)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
pkg_check_modules(CAP REQUIRED IMPORTED_TARGET libcap)
# HPACK for the egress proxy's HTTP/2 secret rewriting (local/secret_rewrite.h).
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
# Line editing for `deepbox run`'s interactive prompt (BSD licence; not readline: GPL).
pkg_check_modules(LIBEDIT REQUIRED IMPORTED_TARGET libedit)
if(DEEPBOX_STATIC_DEPS)
  # The C++ runtime too: libstdc++ alone was ~0.3 ms of each exec. A library
  # dlopen()ed later that needs it (libarchive's ICU) maps the shared one
  # beside it; nothing C++ crosses between them (those libraries' APIs are C).
  add_link_options(-static-libstdc++ -static-libgcc)
  # The imported targets name the shared objects: point them at the archives,
  # with what each archive needs (pkg-config --static --libs).
  function(deepbox_archive var name)
    find_library(${var} NAMES lib${name}.a REQUIRED)
  endfunction()
  foreach(name seccomp nghttp2 re2 edit tinfo bsd md yaml-cpp)
    deepbox_archive(DEEPBOX_ARCHIVE_${name} ${name})
  endforeach()
  set_property(TARGET PkgConfig::SECCOMP PROPERTY INTERFACE_LINK_LIBRARIES ${DEEPBOX_ARCHIVE_seccomp})
  set_property(TARGET PkgConfig::NGHTTP2 PROPERTY INTERFACE_LINK_LIBRARIES ${DEEPBOX_ARCHIVE_nghttp2})
  set_property(TARGET PkgConfig::RE2 PROPERTY INTERFACE_LINK_LIBRARIES ${DEEPBOX_ARCHIVE_re2}
                                                                       Threads::Threads)
  set_property(TARGET PkgConfig::LIBEDIT PROPERTY INTERFACE_LINK_LIBRARIES ${DEEPBOX_ARCHIVE_edit}
               ${DEEPBOX_ARCHIVE_tinfo} ${DEEPBOX_ARCHIVE_bsd} ${DEEPBOX_ARCHIVE_md})
  set_target_properties(yaml-cpp PROPERTIES IMPORTED_LOCATION ${DEEPBOX_ARCHIVE_yaml-cpp}
                                             IMPORTED_LOCATION_NONE ${DEEPBOX_ARCHIVE_yaml-cpp})
endif()
find_package(LibArchive REQUIRED)
if(DEEPBOX_BUILD_TESTS OR DEEPBOX_BUILD_HARDENING_TEST)
  find_package(GTest REQUIRED)
endif()
if(DEEPBOX_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
