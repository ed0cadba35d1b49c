"""Job records of the detached host job: files on the host that the next caller returns to the controller."""

import json

from ansible_collections.gpuops.sglang.plugins.module_utils import host_job, naming


def test_a_record_never_holds_a_credential(tmp_path):
    (tmp_path / naming.JOBS_DIR).mkdir()
    record = {"job_id": "j1", "status": "done", "result": {
        "script_diffs": [{"before": "", "after": "export HF_TOKEN=hf_secret\nexec sglang --admin-api-key adm_key\n"}],
        "servers": [{"name": "gpu0", "msg": "crashed: --hf-token=hf_flag"}]}}
    host_job.write_record(str(tmp_path), record)
    text = (tmp_path / naming.JOBS_DIR / "j1.json").read_text()
    assert not [value for value in ("hf_secret", "adm_key", "hf_flag") if value in text]
    assert json.loads(text)["result"]["script_diffs"][0]["after"].startswith("export HF_TOKEN=********\n")
    assert record["result"]["servers"][0]["msg"] == "crashed: --hf-token=hf_flag", "the caller's record stays"
