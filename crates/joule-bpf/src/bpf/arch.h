/* What differs between the architectures joule's BPF programs are built for, and nothing else:
 * every program includes this instead of testing __TARGET_ARCH_* itself (libbpf-cargo passes
 * -D__TARGET_ARCH_<arch> for the build's target; build.rs picks vmlinux/<arch>/vmlinux.h).
 * Syscall *numbers* are not here: they differ per architecture too, and user space sets them
 * from the libc crate's SYS_* constants of the same target (procmon's nr_* globals). */
#ifndef JOULE_ARCH_H
#define JOULE_ARCH_H

#include <bpf/bpf_core_read.h>

/* The number of the syscall a struct pt_regs * (tp_btf/sys_exit's first argument) belongs to:
 * x86-64 keeps it in orig_ax (ax holds the return value by then), arm64 in syscallno (x0 is
 * overwritten by the return value; orig_x0 is the first argument). */
#if defined(__TARGET_ARCH_x86)
#define JOULE_SYSCALL_NR(regs) BPF_CORE_READ((regs), orig_ax)
#elif defined(__TARGET_ARCH_arm64)
#define JOULE_SYSCALL_NR(regs) BPF_CORE_READ((regs), syscallno)
#else
#error "joule's BPF programs know x86 and arm64: add the architecture here (and a vmlinux/<arch>/vmlinux.h)"
#endif

#endif /* JOULE_ARCH_H */
