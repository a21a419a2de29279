// SPDX-License-Identifier: Apache-2.0

// Package modules owns the kernel-module side of ipvs-guard: which modules
// kube-proxy's IPVS mode needs on this kernel (the desired set), whether each
// is loaded, shipped by the kernel and declared for boot, and — only when a
// caller asks for remediation — declaring them in a modules-load.d file ipvs-guard
// owns and loading them natively.
//
// What it reads (every path through hostfs.Root, so a captured tree can be
// checked with --root):
//
//   - /proc/sys/kernel/osrelease, /proc/modules, /sys/module/<name>
//   - /lib/modules/<release>/modules.{dep,builtin,softdep,alias}, and
//     modules.alias.bin (depmod's binary trie, searched like kmod does) when
//     loading, the text modules.alias standing in when it is missing or malformed
//   - *.conf in /etc/modules-load.d, /run/modules-load.d,
//     /usr/local/lib/modules-load.d, /usr/lib/modules-load.d, /lib/modules-load.d
//     (same-named files in earlier directories override later ones), and
//     Debian's /etc/modules
//   - *.conf in /etc/modprobe.d, /run/modprobe.d, /usr/lib/modprobe.d,
//     /lib/modprobe.d (options, alias, softdep, blacklist) when loading
//
// What it may change, and only through a Checker built with Remediate or a
// Loader called explicitly: the one declaration file it owns (default
// /etc/modules-load.d/ipvs.conf, merge-written atomically, foreign lines kept
// byte for byte, nothing written when nothing changes) and the running kernel's
// module list (finit_module / init_module, resolving modules.dep,
// modules.softdep and modules.alias like kmod's modprobe does).
//
// Using it:
//
//   - The check: NewChecker(Config{Root, Scheduler, Remediate, DeclarationFile,
//     Loader}) is a check.Checker named "modules". Its Result.Reason is the most
//     severe of ReasonModuleNotInKernel, ReasonModulesNotLoaded,
//     ReasonModulesNotPersisted, ReasonStaleModuleDeclaration (or
//     ReasonModulesReady when all is well); Findings are Finding values, one
//     per desired module, then one per stale ip_vs*/nf_conntrack* declaration
//     of a module not desired. Stale declarations of other module families
//     are not this package's business and are not reported.
//   - Reading only: Observe(root, scheduler) returns the same findings plus
//     the kernel index and every declaration, for metrics and conditions.
//   - Loading: NewNativeLoader(root) then Load(ctx, names). It refuses
//     (ErrKernelMismatch) when root's osrelease is not uname's. Errors wrap
//     ErrModuleNotFound, ErrNotELF, ErrInstallCommand or the kernel's errno
//     (errors.Is(err, syscall.ENODEV), …) and name the module and file.
//   - The declaration file must sit in one of ModulesLoadDirs to count as a
//     declaration; a symbolic link there (a /dev/null mask included) is never
//     replaced.
//
// What it must not do: run modprobe, insmod or any other program; edit a
// declaration file it does not own (stale lines there are findings naming the
// file); load anything into a kernel other than the one the files describe
// (a --root tree whose release differs from uname is never loaded from); load
// or write anything when remediation is off.
package modules
