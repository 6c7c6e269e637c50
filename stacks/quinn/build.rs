// The versions of quinn, rustls and h3 the binary is built with, from Cargo.lock (the one
// source of truth), for the row's `library` and `--version`.
use std::fs;

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = fs::read_to_string("Cargo.lock").expect("Cargo.lock");
    for (krate, var) in [
        ("quinn", "QUINN_VER"),
        ("rustls", "RUSTLS_VER"),
        ("h3", "H3_VER"),
    ] {
        let head = format!("name = \"{krate}\"\nversion = \"");
        let at = lock
            .find(&head)
            .unwrap_or_else(|| panic!("{krate} not in Cargo.lock"))
            + head.len();
        let ver = &lock[at..at + lock[at..].find('"').expect("version")];
        println!("cargo:rustc-env={var}={ver}");
    }
}
