# BpfSkeleton.cmake -- compile BPF C files with clang, link them into one
# BPF object with bpftool's static linker and generate its libbpf skeleton;
# vmlinux.h comes from the running kernel's BTF.
#
#   bpf_skeleton(TARGET_NAME SOURCE.bpf.c [MORE.bpf.c ...]
#                DEPENDS headers... INCLUDES dirs...)
# compiles each source apart (NAME.objs/*.bpf.o, with clang's dependency
# file), links them (`bpftool gen object`) into NAME.bpf.o and produces
# ${CMAKE_CURRENT_BINARY_DIR}/NAME.skel.h, struct NAME_bpf (NAME = the
# first SOURCE without .bpf.c), and an interface target TARGET_NAME
# carrying its include dir.  Across the sources, a global or a map is
# defined in one and declared extern in the others (libbpf's linker
# resolves them; `__weak` definitions would leave the losers' bytes in
# .rodata/.bss).

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
  set(srcs ${src} ${ARG_UNPARSED_ARGUMENTS})
  get_filename_component(name ${src} NAME)
  string(REPLACE ".bpf.c" "" name ${name})
  set(objdir ${CMAKE_CURRENT_BINARY_DIR}/${name}.objs)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel ${CMAKE_CURRENT_BINARY_DIR}/${name}.skel.h)
  set(incs -I${BPF_VMLINUX_DIR} -I${CMAKE_CURRENT_SOURCE_DIR})
  foreach(i ${ARG_INCLUDES})
    list(APPEND incs -I${i})
  endforeach()
  if(BPF_MULTIARCH)
    list(APPEND incs -idirafter /usr/include/${BPF_MULTIARCH})
  endif()
  set(parts "")
  foreach(s ${srcs})
    get_filename_component(part ${s} NAME)
    string(REPLACE ".bpf.c" ".bpf.o" part ${part})
    set(part ${objdir}/${part})
    add_custom_command(
      OUTPUT ${part}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${objdir}
      COMMAND ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${BPF_TARGET_ARCH}
              -Wall -Wno-unused-function ${incs} -MD -MF ${part}.d
              -c ${CMAKE_CURRENT_SOURCE_DIR}/${s} -o ${part}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${s} ${BPF_VMLINUX_DIR}/vmlinux.h ${ARG_DEPENDS}
      DEPFILE ${part}.d
      COMMENT "Compiling BPF object ${name}.objs/${s}"
      VERBATIM)
    list(APPEND parts ${part})
  endforeach()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPFTOOL} gen object ${obj} ${parts}
    DEPENDS ${parts}
    COMMENT "Linking BPF object ${name}.bpf.o"
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
