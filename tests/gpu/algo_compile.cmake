# src/algo device-cleanliness check (compile only, nothing runs): instantiates
# every reduction functor, conversion and ring-schedule function in __global__
# kernels. Built with the rest of `all` in CUDA builds; ptxas warnings about
# spills or local memory are errors (STYLE.md: no local-memory spills).
if(FERRY_CUDA)
  add_library(ferry_algo_compile OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/gpu/algo_compile.cu)
  target_include_directories(ferry_algo_compile PRIVATE ${CMAKE_SOURCE_DIR}/src)
  set_target_properties(ferry_algo_compile PROPERTIES CUDA_STANDARD 17)
  target_compile_options(ferry_algo_compile PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xptxas=-warn-spills,-warn-lmem-usage,-Werror>)
endif()
