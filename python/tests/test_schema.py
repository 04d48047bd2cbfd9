"""inspect() and `ringdump show --json` are one schema (ipcring::for_each_field): the same keys
and values for every Snapshot field; ringdump adds only the values it derives at display time."""

import json
import subprocess

import ipcring

# What ringdump derives at display time (docs/operations.md, "show --json").
DERIVED = {
    "top": {"schema_version", "owner_name", "mode_octal", "served_by", "serve_status_problems"},
    "producer": {"publish_rate_hz", "publish_rate_method", "publish_rate_window_ns",
                 "last_publish_age_ns", "uptime_ns"},
    "slot": {"age_ns"},
    "reader": {"read_rate_hz", "lag_frames", "last_read_age_ns", "holds", "hold_p50_ns",
               "hold_p99_ns"},
}


def test_inspect_and_ringdump_json_share_the_schema(channel, ringdump):
    with ipcring.Producer(channel, frame_bytes=64, slots=4, max_readers=2) as p, \
            ipcring.Reader(channel) as r:
        p.send(b"x" * 64)
        frame = r.read(timeout=5)
        assert frame is not None
        d = ipcring.inspect(channel)
        j = json.loads(subprocess.run([ringdump, "show", channel, "--json", "--rate-window-ms",
                                       "0"], capture_output=True, text=True, timeout=30,
                                      check=True).stdout)
        assert set(j) == set(d) | DERIVED["top"]
        assert set(j["producer"]) == set(d["producer"]) | DERIVED["producer"]
        assert len(j["slots"]) == len(d["slots"]) == d["slot_count"] == 4
        for sj, sd in zip(j["slots"], d["slots"]):
            assert set(sj) == set(sd) | DERIVED["slot"]
        assert len(j["readers"]) == len(d["readers"]) == 1
        assert set(j["readers"][0]) == set(d["readers"][0]) | DERIVED["reader"]
        # Fields fixed while the frame is held agree in value too.
        held = d["slots"][frame.slot]
        assert j["slots"][frame.slot]["reader_indices"] == held["reader_indices"] == [r.index]
        assert j["slots"][frame.slot]["sequence"] == held["sequence"] == frame.sequence
        assert d["readers"][0]["delay_count"] == j["readers"][0]["delay_count"] == 1
        # The CUDA path is a schema field (not derived): "none" for a host channel, in both.
        assert "cuda_path" not in DERIVED["top"]
        assert j["backend"] == d["backend"] == "host"
        assert j["cuda_path"] == d["cuda_path"] == "none"
        frame.release()
