# Collective kernels (src/device/coll_kernels_*.cu, compiled into ferry_core):
# ptxas register spills are build errors (STYLE.md: no local-memory spills).
# A compile-time policy on the real objects, so nothing is compiled twice.
# Not -warn-lmem-usage: the timeout printf's 40-byte argument buffer is the
# kernels' one legitimate stack use (touched only when a wait times out).
# To see registers per kernel: add -Xptxas=-v to CMAKE_CUDA_FLAGS.
if(FERRY_CUDA)
  file(GLOB ferry_coll_kernel_sources CONFIGURE_DEPENDS
    ${CMAKE_SOURCE_DIR}/src/device/coll_kernels_*.cu)
  set_source_files_properties(${ferry_coll_kernel_sources} TARGET_DIRECTORY ferry_core
    PROPERTIES COMPILE_OPTIONS "-Xptxas=-warn-spills,-Werror")
endif()
