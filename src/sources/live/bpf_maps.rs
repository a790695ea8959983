//! Cilium's service maps on the live node, read through `bpftool -j`.

use std::io::{self, BufRead};
use std::path::PathBuf;

use crate::heart::cilium::MapKind;
use crate::sources::source::Fetched;

use super::LiveNode;

impl LiveNode {
    /// Where Cilium pins `kind` under the BPF filesystem.
    pub(super) fn pin_path(&self, kind: MapKind) -> PathBuf {
        self.config.bpf_root.join("tc/globals").join(kind.pin_name())
    }

    /// One of Cilium's service maps through `bpftool -j`: `map show` (`info`) or `map
    /// dump`. bpftool rather than the bpf(2) calls themselves: the crate forbids `unsafe`
    /// and the kernel's own tool prints the same JSON live as a bundle keeps, so a
    /// snapshot replays exactly what a live scan parsed. A map that is not pinned is not
    /// present: the node has no Cilium, or not that family.
    pub(super) fn cilium_map<T, F>(&self, kind: MapKind, info: bool, consume: F) -> Fetched<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn BufRead) -> io::Result<T> + Send + 'static,
    {
        let path = self.pin_path(kind);
        if !path.exists() {
            return Fetched::not_present();
        }
        let args = bpftool_args(&path, info);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run("bpftool", &args, consume)
    }
}

/// bpftool's arguments to show or dump the map pinned at `path`, as JSON.
pub(super) fn bpftool_args(path: &std::path::Path, info: bool) -> Vec<String> {
    let verb = if info { "show" } else { "dump" };
    ["-j", "map", verb, "pinned"]
        .into_iter()
        .map(str::to_string)
        .chain([path.display().to_string()])
        .collect()
}
