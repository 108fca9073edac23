//! Builds the BPF side: vmlinux.h from the running kernel's BTF, a libbpf-rs skeleton per
//! src/bpf/*.bpf.c (clang-16, -mcpu=v3), and Rust bindings of src/bpf/intf.h (bindgen).
use libbpf_cargo::SkeletonBuilder;
use std::{env, path::PathBuf, process::Command};

const BTF: &str = "/sys/kernel/btf/vmlinux";
const PROGS: &[&str] = &["runqlat", "thermal"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("src/bpf");
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    println!("cargo:rerun-if-env-changed=JOULE_BPF_CLANG");
    println!("cargo:rerun-if-env-changed=BPFTOOL");
    write_vmlinux_h(&out);

    bindgen::Builder::default()
        .header(bpf_dir.join("intf.h").to_string_lossy())
        .prepend_enum_name(false)
        .derive_default(true)
        .generate()
        .expect("bindgen could not read src/bpf/intf.h (it needs libclang, from libclang1-16)")
        .write_to_file(out.join("intf.rs"))
        .expect("cannot write intf.rs");

    let clang = env::var("JOULE_BPF_CLANG").unwrap_or_else(|_| "clang-16".into());
    for name in PROGS {
        SkeletonBuilder::new()
            .source(bpf_dir.join(format!("{name}.bpf.c")))
            .clang(&clang)
            .clang_args([
                "-mcpu=v3".into(),
                "-fms-extensions".into(),
                "-Wno-microsoft-anon-tag".into(),
                format!("-I{}", out.display()),
                format!("-I{}", bpf_dir.display()),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building src/bpf/{name}.bpf.c with {clang}: {e:#}"));
    }
}

/// CO-RE needs the kernel's types; they come from the build machine's BTF, never from git.
fn write_vmlinux_h(out: &std::path::Path) {
    if !std::path::Path::new(BTF).exists() {
        panic!("{BTF} is missing: joule-bpf needs a kernel built with CONFIG_DEBUG_INFO_BTF=y to generate vmlinux.h");
    }
    let bpftool = env::var("BPFTOOL").ok().or_else(|| {
        ["bpftool", "/usr/sbin/bpftool"].into_iter().find(|b| Command::new(b).arg("version").output().is_ok()).map(Into::into)
    });
    let bpftool = bpftool.expect("bpftool not found (Debian package `bpftool`, or set BPFTOOL)");
    let dump = Command::new(&bpftool)
        .args(["btf", "dump", "file", BTF, "format", "c"])
        .output()
        .unwrap_or_else(|e| panic!("running {bpftool}: {e}"));
    if !dump.status.success() {
        panic!("{bpftool} btf dump failed: {}", String::from_utf8_lossy(&dump.stderr));
    }
    std::fs::write(out.join("vmlinux.h"), dump.stdout).expect("cannot write vmlinux.h");
}
