# BpfSkeleton.cmake -- compile a BPF C file with clang and generate its
# libbpf skeleton with bpftool; vmlinux.h comes from the running kernel's BTF.
#
#   bpf_skeleton(TARGET_NAME SOURCE.bpf.c DEPENDS headers...)
# produces ${CMAKE_CURRENT_BINARY_DIR}/NAME.skel.h (NAME = SOURCE without
# .bpf.c) and an interface target TARGET_NAME carrying its include dir.

find_program(BPF_CLANG NAMES clang clang-16 clang-15 clang-14 REQUIRED)
find_program(BPFTOOL bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)
if(NOT EXISTS /sys/kernel/btf/vmlinux)
  message(FATAL_ERROR "this kernel has no BTF (/sys/kernel/btf/vmlinux is missing): "
                      "loopscope's tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
endif()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(BPF_TARGET_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(BPF_TARGET_ARCH arm64)
else()
  set(BPF_TARGET_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch
                OUTPUT_VARIABLE BPF_MULTIARCH OUTPUT_STRIP_TRAILING_WHITESPACE)

set(BPF_VMLINUX_DIR ${CMAKE_BINARY_DIR}/bpf)
add_custom_command(
  OUTPUT ${BPF_VMLINUX_DIR}/vmlinux.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${BPF_VMLINUX_DIR}
  COMMAND ${BPFTOOL} btf dump file /sys/kernel/btf/vmlinux format c > ${BPF_VMLINUX_DIR}/vmlinux.h
  COMMENT "Generating vmlinux.h from /sys/kernel/btf/vmlinux"
  VERBATIM)

function(bpf_skeleton target src)
  cmake_parse_arguments(ARG "" "" "DEPENDS;INCLUDES" ${ARGN})
  get_filename_component(name ${src} NAME)
  string(REPLACE ".bpf.c" "" name ${name})
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel ${CMAKE_CURRENT_BINARY_DIR}/${name}.skel.h)
  set(incs -I${BPF_VMLINUX_DIR} -I${CMAKE_CURRENT_SOURCE_DIR})
  foreach(i ${ARG_INCLUDES})
    list(APPEND incs -I${i})
  endforeach()
  if(BPF_MULTIARCH)
    list(APPEND incs -idirafter /usr/include/${BPF_MULTIARCH})
  endif()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${BPF_TARGET_ARCH}
            -Wall -Wno-unused-function ${incs}
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${src} ${BPF_VMLINUX_DIR}/vmlinux.h ${ARG_DEPENDS}
    COMMENT "Compiling BPF object ${name}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "Generating BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${target}_gen DEPENDS ${skel})
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_gen)
  target_include_directories(${target} INTERFACE ${CMAKE_CURRENT_BINARY_DIR})
endfunction()
