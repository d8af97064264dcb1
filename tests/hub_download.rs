//! Models by Hub id against a local server that plays the Hub (tests/hub_support): the
//! shared cache layout (identical to what `huggingface_hub`'s snapshot_download writes for
//! the same server, when python3 has it), reuse without a request, offline mode, no network,
//! resume after a cut connection, a corrupted blob caught, a gated repository's errors, the
//! quant chosen among several GGUFs, split GGUFs, two processes fetching one file, and the
//! CLI (`generate --model ORG/NAME:Q4_1`, `pull`, `models`, `rm`).
//!
//! The comparison with Python is skipped (with a message) when python3 lacks
//! `huggingface_hub`, unless `PAGODA_REQUIRE_PYTHON=1` (as `scripts/test.sh` sets it).
#![cfg(feature = "server")]

mod hub_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hub_support::{FakeHub, GOOD_TOKEN, HubFile, HubRepo};
use pagoda::hub::{Freshness, HubError, HubId, HubSettings, ProgressStyle, fetch};
use pagoda::model::ModelFiles;

const COMMIT: &str = "4a1b2c3d4e5f60718293a4b5c6d7e8f901234567";

fn families_dir() -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the directory scripts/tiny-families.py prints")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A safetensors Qwen3, its GGUF quants (one real, the rest stand-ins) with a split one, and
/// a gated repository.
fn repos() -> Vec<HubRepo> {
    let qwen3 = families_dir().join("qwen3");
    let file = |name: &str| HubFile::new(name, read(&qwen3.join(name)));
    let filler = |name: &str, len: usize| HubFile::new(name, (0..len).map(|i| (i * 7 % 251) as u8).collect());
    vec![
        HubRepo {
            id: "test/qwen3".into(),
            commit: COMMIT.into(),
            files: vec![
                file("config.json"),
                file("tokenizer.json"),
                file("tokenizer_config.json"),
                file("model.safetensors"),
                HubFile::new("README.md", b"# tiny qwen3\n".to_vec()),
            ],
            gated: false,
        },
        HubRepo {
            id: "test/qwen3-GGUF".into(),
            commit: COMMIT.into(),
            files: vec![
                HubFile::new("qwen3-Q8_0.gguf", read(&qwen3.join("qwen3.q8_0.gguf"))),
                filler("qwen3-F16.gguf", 1000),
                filler("qwen3-Q4_0-00001-of-00002.gguf", 300_000),
                filler("qwen3-Q4_0-00002-of-00002.gguf", 200_000),
                filler("mmproj-qwen3-Q8_0.gguf", 100),
                HubFile::new("README.md", b"# tiny qwen3 GGUF\n".to_vec()),
            ],
            gated: false,
        },
        HubRepo {
            id: "test/gated".into(),
            commit: COMMIT.into(),
            files: vec![filler("gated-Q4_0.gguf", 5000)],
            gated: true,
        },
    ]
}

fn settings(hub_url: &str, cache: &Path) -> HubSettings {
    HubSettings {
        cache_dir: cache.to_owned(),
        endpoint: hub_url.to_owned(),
        token: None,
        offline: false,
        metadata_timeout: Duration::from_secs(5),
        download_timeout: Duration::from_secs(5),
        progress: ProgressStyle::Lines,
    }
}

fn id(text: &str) -> HubId {
    HubId::parse(text).unwrap()
}

/// Every entry under `root`: a link's target, or a file's bytes, by relative path.
fn tree_of(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_symlink() {
                out.insert(name, format!("-> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let shown = if bytes.len() < 4096 {
                    String::from_utf8_lossy(&bytes).into_owned()
                } else {
                    format!("{} bytes", bytes.len())
                };
                out.insert(name, shown);
            }
        }
    }
    out
}

fn python_has_huggingface_hub() -> bool {
    let ok =
        Command::new("python3").args(["-c", "import huggingface_hub"]).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("PAGODA_REQUIRE_PYTHON").as_deref() != Ok("1"),
            "python3 with huggingface_hub is required (pip install huggingface_hub)"
        );
        eprintln!("skipped the comparison: python3 lacks huggingface_hub");
    }
    ok
}

#[test]
fn downloads_into_the_shared_layout_and_reuses_it_without_a_request() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("pagoda");
    let s = settings(&hub.url, &cache);
    let mut taken = Vec::new();
    for text in ["test/qwen3", "test/qwen3-GGUF:Q8_0"] {
        let fetched = fetch(&id(text), &s, Freshness::CacheFirst).unwrap();
        assert_eq!(fetched.commit, COMMIT);
        ModelFiles::open(&fetched.path).unwrap_or_else(|e| panic!("{text}: {e}"));
        taken.push((text.split(':').next().unwrap().to_owned(), fetched.files));
    }
    let folder = cache.join("models--test--qwen3");
    assert_eq!(std::fs::read_to_string(folder.join("refs/main")).unwrap(), COMMIT);
    let config = std::fs::read_link(folder.join("snapshots").join(COMMIT).join("config.json")).unwrap();
    assert!(config.starts_with("../../blobs"), "{}", config.display());
    assert!(folder.join("trees").join(format!("{COMMIT}.json")).is_file());
    assert!(cache.join("CACHEDIR.TAG").is_file());
    assert!(!hub.take_log().is_empty());

    // Everything is cached: no request at all.
    for text in ["test/qwen3", "test/qwen3-GGUF:Q8_0"] {
        fetch(&id(text), &s, Freshness::CacheFirst).unwrap();
    }
    assert_eq!(hub.take_log(), Vec::<String>::new());

    // huggingface_hub's snapshot_download of the same files writes the same tree.
    if python_has_huggingface_hub() {
        let python_cache = dir.path().join("python");
        for (repo, files) in &taken {
            let out = Command::new("python3")
                .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hub_snapshot.py"))
                .args([&hub.url, python_cache.to_str().unwrap(), repo])
                .args(files)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(tree_of(&cache), tree_of(&python_cache));
    }
}

#[test]
fn offline_mode_uses_the_cache_and_names_what_is_missing() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(&hub.url, dir.path());
    fetch(&id("test/qwen3-GGUF:Q8_0"), &s, Freshness::CacheFirst).unwrap();
    hub.take_log();
    s.offline = true;
    // `pull` asks for the latest commit, except offline.
    fetch(&id("test/qwen3-GGUF:Q8_0"), &s, Freshness::Latest).unwrap();
    let error = fetch(&id("test/qwen3-GGUF:F16"), &s, Freshness::CacheFirst).unwrap_err();
    assert!(matches!(error, HubError::Offline { .. }), "{error}");
    assert!(error.to_string().contains("test/qwen3-GGUF:F16"), "{error}");
    assert_eq!(hub.take_log(), Vec::<String>::new());
}

#[test]
fn no_network_is_a_clear_error_quickly_and_the_cache_still_serves() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    fetch(&id("test/qwen3-GGUF:F16"), &settings(&hub.url, dir.path()), Freshness::CacheFirst).unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let s = settings(&gone, dir.path());
    let started = Instant::now();
    let error = fetch(&id("test/qwen3-GGUF:Q8_0"), &s, Freshness::CacheFirst).unwrap_err();
    assert!(matches!(error, HubError::Unreachable { .. }), "{error}");
    assert!(error.to_string().contains("test/qwen3-GGUF:Q8_0"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // `pull` falls back to the cached copy.
    fetch(&id("test/qwen3-GGUF:F16"), &s, Freshness::Latest).unwrap();
}

#[test]
fn a_cut_connection_resumes_with_a_range_request() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    hub.cut_next("qwen3-Q8_0.gguf", 3 << 20);
    let fetched =
        fetch(&id("test/qwen3-GGUF:Q8_0"), &settings(&hub.url, dir.path()), Freshness::Latest).unwrap();
    ModelFiles::open(&fetched.path).unwrap();
    let gets: Vec<String> = hub.take_log().into_iter().filter(|l| l.starts_with("GET /cdn/")).collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    // Resumed where the first connection's bytes stopped arriving (at most where it was cut).
    let resumed: u64 =
        gets[1].rsplit_once("bytes=").and_then(|(_, r)| r.trim_end_matches('-').parse().ok()).unwrap();
    assert!(resumed > 0 && resumed <= 3 << 20, "{gets:?}");
}

#[test]
fn a_corrupted_blob_is_caught_deleted_and_reported() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&hub.url, dir.path());
    hub.corrupt("qwen3-F16.gguf", true);
    let error = fetch(&id("test/qwen3-GGUF:F16"), &s, Freshness::Latest).unwrap_err();
    assert!(matches!(&error, HubError::Checksum { file, .. } if file == "qwen3-F16.gguf"), "{error}");
    let folder = dir.path().join("models--test--qwen3-GGUF");
    let blobs: Vec<_> =
        std::fs::read_dir(folder.join("blobs")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(blobs.is_empty(), "{blobs:?}");
    assert!(!folder.join("snapshots").join(COMMIT).join("qwen3-F16.gguf").exists());
    hub.corrupt("qwen3-F16.gguf", false);
    fetch(&id("test/qwen3-GGUF:F16"), &s, Freshness::Latest).unwrap();
}

#[test]
fn a_gated_repository_asks_for_a_token_then_for_access() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(&hub.url, dir.path());
    let gated = id("test/gated:Q4_0");
    let error = fetch(&gated, &s, Freshness::Latest).unwrap_err();
    assert!(
        matches!(&error, HubError::NeedsToken { url, .. } if *url == format!("{}/test/gated", hub.url)),
        "{error}"
    );
    s.token = Some("hf_someone_else".into());
    let error = fetch(&gated, &s, Freshness::Latest).unwrap_err();
    assert!(matches!(error, HubError::NotAuthorized { .. }), "{error}");
    assert!(error.to_string().contains("accept the license"), "{error}");
    s.token = Some(GOOD_TOKEN.into());
    fetch(&gated, &s, Freshness::Latest).unwrap();
}

#[test]
fn quants_splits_and_missing_things() {
    let hub = FakeHub::start(repos());
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&hub.url, dir.path());
    let split = fetch(&id("test/qwen3-GGUF:q4_0"), &s, Freshness::Latest).unwrap();
    assert_eq!(split.files, ["qwen3-Q4_0-00001-of-00002.gguf", "qwen3-Q4_0-00002-of-00002.gguf"]);
    assert!(split.path.ends_with("qwen3-Q4_0-00001-of-00002.gguf"));
    assert!(split.path.with_file_name("qwen3-Q4_0-00002-of-00002.gguf").is_file());
    let file = fetch(&id("test/qwen3-GGUF/qwen3-F16.gguf"), &s, Freshness::Latest).unwrap();
    assert_eq!(file.files, ["qwen3-F16.gguf"]);
    let by_commit = fetch(&id(&format!("test/qwen3-GGUF:Q8_0@{COMMIT}")), &s, Freshness::Latest).unwrap();
    assert!(by_commit.path.ends_with("qwen3-Q8_0.gguf"));
    // Not mmproj-qwen3-Q8_0.gguf, and the default quant falls back to Q8_0.
    assert_eq!(fetch(&id("test/qwen3-GGUF"), &s, Freshness::Latest).unwrap().files, ["qwen3-Q8_0.gguf"]);

    let error = fetch(&id("test/qwen3-GGUF:Q5_K_M"), &s, Freshness::Latest).unwrap_err();
    assert!(matches!(&error, HubError::NoQuant { available, .. } if available.len() == 5), "{error}");
    assert!(matches!(fetch(&id("test/nothing"), &s, Freshness::Latest), Err(HubError::RepoNotFound { .. })));
    assert!(matches!(
        fetch(&id("test/qwen3@v9"), &s, Freshness::Latest),
        Err(HubError::RevisionNotFound { revision, .. }) if revision == "v9"
    ));
    assert!(matches!(
        fetch(&id("test/qwen3-GGUF/none.gguf"), &s, Freshness::Latest),
        Err(HubError::FileNotFound { .. })
    ));
}

fn pagoda(hub: &FakeHub, home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagoda"));
    command
        .env("HF_ENDPOINT", &hub.url)
        .env("HF_HOME", home)
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    command
}

#[test]
fn two_processes_fetch_one_file_once() {
    let hub = FakeHub::start(repos());
    let home = tempfile::tempdir().unwrap();
    hub.slow("qwen3-Q8_0.gguf");
    let spawned: Vec<_> = (0..2)
        .map(|_| {
            pagoda(&hub, home.path())
                .args(["pull", "test/qwen3-GGUF:Q8_0"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in spawned {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let gets: Vec<String> = hub.take_log().into_iter().filter(|l| l.starts_with("GET /cdn/")).collect();
    assert_eq!(gets.len(), 1, "the blob was downloaded more than once: {gets:?}");
    let path =
        home.path().join("hub/models--test--qwen3-GGUF/snapshots").join(COMMIT).join("qwen3-Q8_0.gguf");
    ModelFiles::open(&path).unwrap();
}

#[test]
fn the_cli_generates_pulls_lists_and_removes_by_id() {
    let gguf = pagoda::model::default_model_path().unwrap();
    let hub = FakeHub::start(vec![HubRepo {
        id: "test/SmolLM2-135M-Instruct-GGUF".into(),
        commit: COMMIT.into(),
        files: vec![HubFile::new("SmolLM2-135M-Instruct-Q4_1.gguf", read(&gguf))],
        gated: false,
    }]);
    let home = tempfile::tempdir().unwrap();
    let model = "test/SmolLM2-135M-Instruct-GGUF:Q4_1";
    let run = |args: &[&str]| {
        let out = pagoda(&hub, home.path()).args(args).output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let (ok, text) = run(&[
        "generate",
        "--model",
        model,
        "--max-tokens",
        "3",
        "--temperature",
        "0",
        "--num-gpu-blocks",
        "64",
        "The capital of France is",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("downloading SmolLM2-135M-Instruct-Q4_1.gguf"), "{text}");
    let (ok, text) = run(&["models"]);
    assert!(ok && text.contains(model) && text.contains("llama") && text.contains("yes"), "{text}");
    let (ok, text) = run(&["rm", model]);
    assert!(ok, "{text}");
    let (_, text) = run(&["models"]);
    assert!(!text.contains(model), "{text}");
    // Offline with nothing cached: the id in a clear error.
    let out = pagoda(&hub, home.path()).env("HF_HUB_OFFLINE", "1").args(["pull", model]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(model) && stderr.contains("HF_HUB_OFFLINE"), "{stderr}");
}
