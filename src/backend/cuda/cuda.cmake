# cuda.cmake — the CUDA backend of target `ipcring` (included by src/CMakeLists.txt).
#
# IPCRING_WITH_CUDA (cache, top-level CMakeLists.txt):
#   AUTO  use the CUDA Toolkit when find_package(CUDAToolkit) finds one (default);
#   ON    require it;
#   OFF   build without it (Backend::cuda then reports Errc::unsupported).
# Sets IPCRING_HAVE_CUDA (a cache entry, so tests/ sees it too).
#
# The library links the CUDA runtime only (CUDA::cudart), never the driver library
# (CUDA::cuda_driver): the runtime loads the driver at run time and reports
# cudaErrorInsufficientDriver / cudaErrorNoDevice when there is none, so a build with the backend
# runs, and its tests pass, on machines without a GPU or driver.
#
# The pool logic (cuda_pool.cpp) includes no CUDA header and is compiled in every build, so the unit
# tests can drive it through the fake CUDA of tests/unit/fake_cuda.* even without a Toolkit; only
# cuda_api_cudart.cpp, the runtime binding, needs the Toolkit.

string(TOUPPER "${IPCRING_WITH_CUDA}" _ipcring_cuda_mode)
if(NOT _ipcring_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "IPCRING_WITH_CUDA must be AUTO, ON or OFF (got '${IPCRING_WITH_CUDA}')")
endif()

set(_ipcring_have_cuda OFF)
set(IPCRING_PC_EXTRA_LIBS "" CACHE INTERNAL "Extra Libs of ipcring.pc")
if(NOT _ipcring_cuda_mode STREQUAL "OFF")
  if(_ipcring_cuda_mode STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart)
    set(_ipcring_have_cuda ON)
  endif()
endif()
set(IPCRING_HAVE_CUDA ${_ipcring_have_cuda} CACHE INTERNAL "ipcring is built with the CUDA backend")

target_sources(ipcring PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_pool.cpp)
target_compile_definitions(ipcring PRIVATE IPCRING_CUDA_POOL_LOGIC=1)
if(IPCRING_HAVE_CUDA)
  target_sources(ipcring PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_api_cudart.cpp)
  target_link_libraries(ipcring PRIVATE CUDA::cudart)
  set(IPCRING_PC_EXTRA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart" CACHE INTERNAL
      "Extra Libs of ipcring.pc")
  message(STATUS "ipcring: CUDA backend ON (CUDA Toolkit ${CUDAToolkit_VERSION}, CUDA::cudart)")
else()
  message(STATUS "ipcring: CUDA backend OFF (IPCRING_WITH_CUDA=${IPCRING_WITH_CUDA}; "
                 "Backend::cuda reports Errc::unsupported)")
endif()
