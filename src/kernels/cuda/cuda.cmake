# cuda.cmake: finds nvcc and the CUDA toolkit and builds the CUDA backend (docs/cuda.md).
#
#   -DHPT_CUDA=OFF                 never build it (the default is to build it when nvcc is found)
#   -DHPT_CUDA_ARCHS="80;90"       the GPU architectures compiled for (sm_80 A100, sm_90 H100/H200)
#   -DCMAKE_CUDA_COMPILER=PATH     an nvcc that is not on PATH or in /usr/local/cuda/bin
#   -DHPT_NCCL=OFF                 no NCCL transport (the default: built when nccl.h and libnccl
#                                  are found beside the toolkit, or at NCCL_INCLUDE_DIR and
#                                  NCCL_LIBRARY, e.g. PyTorch's nvidia/nccl wheel: gpu_check.sh)
#
# Sets HPT_HAVE_CUDA and defines hpt_cuda_attach(target): the backend's objects (compiled once,
# without the sanitizer: nvcc's host code is not instrumented) go into the library target, which
# then links cudart, cuBLAS and cuBLASLt and defines HPT_HAVE_CUDA for itself and its users;
# with NCCL found, HPT_HAVE_NCCL too (src/dist/nccl.c, docs/zero.md "NCCL").
option(HPT_CUDA "build the CUDA backend when nvcc and the CUDA toolkit are found" ON)
set(HPT_CUDA_ARCHS "80;90" CACHE STRING "CUDA architectures of the CUDA backend (CMAKE_CUDA_ARCHITECTURES form)")
set(HPT_HAVE_CUDA OFF)

if(HPT_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${HPT_CUDA_ARCHS})
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
      set(HPT_HAVE_CUDA ON)
    endif()
  endif()
endif()

if(HPT_HAVE_CUDA)
  message(STATUS "hptrain: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${HPT_CUDA_ARCHS})")
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  file(GLOB HPT_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu)
  add_library(hptrain_cuda OBJECT ${HPT_CUDA_SOURCES})
  target_include_directories(hptrain_cuda PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(hptrain_cuda PRIVATE HPT_HAVE_CUDA=1)
  set_target_properties(hptrain_cuda PROPERTIES CUDA_ARCHITECTURES "${HPT_CUDA_ARCHS}"
                        POSITION_INDEPENDENT_CODE ON)
  # warnings are errors here too: nvcc's own (all-warnings) and the host compiler's
  # --fmad=false: no FMA contraction, as the CPU's ISO C build (elementwise ops then agree with it)
  target_compile_options(hptrain_cuda PRIVATE -O3 --fmad=false --Werror all-warnings
    -Xcompiler=-Wall,-Wextra,-Werror,-Wshadow,-Wno-unused-parameter,-fno-math-errno,-ffp-contract=off
    --expt-relaxed-constexpr)
  target_link_libraries(hptrain_cuda PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
  option(HPT_NCCL "the NCCL transport of src/dist/ when nccl.h and libnccl are found" ON)
  set(HPT_HAVE_NCCL OFF)
  if(HPT_NCCL)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(HPT_HAVE_NCCL ON)
    endif()
  endif()
  message(STATUS "hptrain: NCCL transport ${HPT_HAVE_NCCL} (HPT_NCCL=${HPT_NCCL}; ${NCCL_LIBRARY})")
else()
  message(STATUS "hptrain: CUDA backend OFF (HPT_CUDA=${HPT_CUDA}; nvcc and the CUDA toolkit are needed)")
endif()

function(hpt_cuda_attach target)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:hptrain_cuda>)
  target_compile_definitions(${target} PUBLIC HPT_HAVE_CUDA=1)
  # the C linker links the tests and the command line: libstdc++ for nvcc's host code
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt stdc++)
  if(HPT_HAVE_NCCL)
    target_include_directories(${target} PRIVATE ${NCCL_INCLUDE_DIR})
    target_compile_definitions(${target} PUBLIC HPT_HAVE_NCCL=1)
    target_link_libraries(${target} PUBLIC ${NCCL_LIBRARY})
  endif()
endfunction()
