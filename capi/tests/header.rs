//! `include/pagoda.h` is what cbindgen generates from this crate today.
//!
//! `PAGODA_BLESS=1 cargo test -p pagoda-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let bindings = cbindgen::generate_with_config(crate_dir, config).expect("cbindgen parses the crate");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let header = crate_dir.join("../include/pagoda.h");
    if std::env::var_os("PAGODA_BLESS").is_some() {
        std::fs::write(&header, &generated).expect("write include/pagoda.h");
        return;
    }
    let committed = std::fs::read(&header).unwrap_or_default();
    assert!(
        committed == generated,
        "include/pagoda.h is stale: run `PAGODA_BLESS=1 cargo test -p pagoda-capi --test header`"
    );
}
