//! Builds the BPF side, one program per entry of PROGS: a libbpf-rs skeleton of
//! src/bpf/<name>.bpf.c (clang-16, -mcpu=v3, CO-RE against the checked-in
//! src/bpf/vmlinux/<arch>/vmlinux.h of the target architecture, x86_64, aarch64 or arm, see
//! scripts/gen-vmlinux.sh; the C itself is the same for all), and the Rust bindings of the one
//! shared src/bpf/intf.h (bindgen). Nothing here depends on the build machine's kernel or
//! architecture: a cross build compiles the same programs.
use libbpf_cargo::SkeletonBuilder;
use std::{env, path::PathBuf};

// `scx_other` is a test-only scheduler: only the example of that name includes its skeleton.
const PROGS: &[&str] = &["runqlat", "thermal", "scx", "nap", "flow", "netlimit", "procmon", "scx_other"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let bpf = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("src/bpf");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let vmlinux = bpf.join("vmlinux").join(&arch);
    assert!(
        vmlinux.join("vmlinux.h").exists(),
        "joule's BPF programs are built for x86_64, aarch64 and arm; there is no {}/vmlinux.h for this target (scripts/gen-vmlinux.sh makes one)",
        vmlinux.display()
    );
    // No 32-bit ARM kernel has sched_ext (its struct_ops needs BPF trampolines, which the arm
    // JIT lacks), so arm's header has none of its types: the schedulers compile against
    // aarch64's, and an arm kernel refuses them at load as it would any struct_ops.
    let types_of = |name: &str| if arch == "arm" && name.starts_with("scx") { bpf.join("vmlinux/aarch64") } else { vmlinux.clone() };
    let clang = env::var("JOULE_BPF_CLANG").unwrap_or_else(|_| "clang-16".into());
    // The 7.x header has anonymous embedded structs (-fms-extensions); clang-16 stops at v3.
    let clang_args = |name: &str| -> [String; 5] {
        [
            "-mcpu=v3".into(),
            "-fms-extensions".into(),
            "-Wno-microsoft-anon-tag".into(),
            format!("-I{}", types_of(name).display()),
            format!("-I{}", bpf.display()),
        ]
    };
    println!("cargo:rerun-if-changed={}", bpf.display());
    println!("cargo:rerun-if-env-changed=JOULE_BPF_CLANG");

    bindgen::Builder::default()
        .header(bpf.join("intf.h").to_string_lossy())
        .prepend_enum_name(false)
        .derive_default(true)
        .generate()
        .expect("bindgen could not read src/bpf/intf.h (it needs libclang, from libclang1-16)")
        .write_to_file(out.join("intf.rs"))
        .expect("cannot write intf.rs");

    for name in PROGS {
        SkeletonBuilder::new()
            .source(bpf.join(format!("{name}.bpf.c")))
            .clang(&clang)
            .clang_args(clang_args(name))
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building src/bpf/{name}.bpf.c with {clang}: {e:#}"));
    }
}
