# Fuzz targets (tests/fuzz/fuzz_*.c), one per reader.
#  - Every build: each target is also a plain program (tests/fuzz/replay.c) that ctest runs
#    on its seed corpus and its regression inputs (tests/fuzz/regress/<target>/: every crash
#    the fuzzers found, kept after the fix), in each variant (plain, sanitizer).
#  - -DHPT_FUZZ=ON with clang (-DCMAKE_C_COMPILER=clang): the library once more, built with
#    -fsanitize=fuzzer-no-link,address,undefined, and each target a libFuzzer program; ctest
#    runs each for HPT_FUZZ_SECONDS (20) from its seeds, new inputs kept under
#    <build>/fuzz_corpus/<target>, crashes under <build>/fuzz_crash/. The library's usual
#    variants and tests are not built in such a tree (HPT_FUZZ clears HPT_VARIANTS and skips
#    tests/tests.cmake). The library compiles there with the warning list but not as errors:
#    clang warns about things gcc does not (the gcc builds hold the line).
set(HPT_FUZZ_TARGETS state llmc refstate shard tokbin tokgpt2 trace safetensors hfconfig hfmodel tokjson
    tiktoken chat)
set(HPT_FUZZ_DIR ${CMAKE_SOURCE_DIR}/tests/fuzz)

foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  foreach(t IN LISTS HPT_FUZZ_TARGETS)
    add_executable(fuzz_replay_${t}${v} ${HPT_FUZZ_DIR}/fuzz_${t}.c ${HPT_FUZZ_DIR}/fuzz_common.c
                   ${HPT_FUZZ_DIR}/replay.c)
    target_include_directories(fuzz_replay_${t}${v} PRIVATE ${CMAKE_SOURCE_DIR}/src ${HPT_FUZZ_DIR})
    target_compile_options(fuzz_replay_${t}${v} PRIVATE ${HPT_WARNINGS})
    target_link_libraries(fuzz_replay_${t}${v} PRIVATE hptrain${v})
    add_test(NAME fuzz_replay_${t}${v} COMMAND fuzz_replay_${t}${v} ${HPT_FUZZ_DIR}/seeds/${t}
             ${HPT_FUZZ_DIR}/regress/${t})
    set_tests_properties(fuzz_replay_${t}${v} PROPERTIES ENVIRONMENT
      "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp")
  endforeach()
endforeach()

if(HPT_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "HPT_FUZZ needs clang's libFuzzer: -DCMAKE_C_COMPILER=clang")
  endif()
  set(HPT_FUZZ_SECONDS 20 CACHE STRING "seconds each fuzz target runs under ctest")
  set(HPT_FUZZ_FLAGS -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
      -fno-sanitize-recover=all)
  add_library(hptrain_fuzz STATIC ${HPT_SOURCES})
  target_include_directories(hptrain_fuzz PUBLIC ${CMAKE_SOURCE_DIR}/include
                             PRIVATE ${CMAKE_SOURCE_DIR}/src ${CJSON_INC})
  target_compile_options(hptrain_fuzz PRIVATE ${HPT_WARNINGS} -Wno-error -Wno-pass-failed
                         PUBLIC ${HPT_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
  target_compile_definitions(hptrain_fuzz PUBLIC HPT_SANITIZED=1)
  target_link_options(hptrain_fuzz PUBLIC -fsanitize=address,undefined)
  target_link_libraries(hptrain_fuzz PUBLIC OpenMP::OpenMP_C ${DNNL_LIB} ${PCRE2_LIB} ${CJSON_LIB} ${UTF8PROC_LIB} mvec m)
  foreach(t IN LISTS HPT_FUZZ_TARGETS)
    add_executable(fuzz_${t} ${HPT_FUZZ_DIR}/fuzz_${t}.c ${HPT_FUZZ_DIR}/fuzz_common.c)
    target_include_directories(fuzz_${t} PRIVATE ${CMAKE_SOURCE_DIR}/src ${HPT_FUZZ_DIR})
    target_compile_options(fuzz_${t} PRIVATE ${HPT_WARNINGS} -Wno-unknown-warning-option)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${t} PRIVATE hptrain_fuzz)
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz_corpus/${t} ${CMAKE_BINARY_DIR}/fuzz_crash)
    set(args -max_total_time=${HPT_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=65536
        -print_final_stats=1 -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz_crash/${t}-
        ${CMAKE_BINARY_DIR}/fuzz_corpus/${t} ${HPT_FUZZ_DIR}/seeds/${t})
    if(EXISTS ${HPT_FUZZ_DIR}/regress/${t})
      list(APPEND args ${HPT_FUZZ_DIR}/regress/${t})
    endif()
    add_test(NAME fuzz_${t} COMMAND fuzz_${t} ${args})
    set_tests_properties(fuzz_${t} PROPERTIES TIMEOUT 300 ENVIRONMENT
      "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp")
  endforeach()
endif()
