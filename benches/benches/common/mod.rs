//! What several benchmarks share: an `eddy serve` in the benchmark's own
//! process.

/// Starts an `eddy serve` on a loopback port with its data in `dir`, on a
/// thread of its own; its URL.
pub fn serve(dir: &std::path::Path) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    let config = eddy_server::ServerConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        api_key: None,
        limits: eddy_server::Limits::default(),
        file_dirs: Vec::new(),
        pg_bind: None,
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(eddy_server::serve(
            config,
            move |addr| tx.send(addr).unwrap(),
            std::future::pending(),
        ))
        .unwrap();
    });
    format!("http://{}", rx.recv().unwrap())
}
