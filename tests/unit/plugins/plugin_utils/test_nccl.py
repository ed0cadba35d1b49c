"""NCCL profiles and validation against the values NCCL documents."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils.nccl import (
    NcclError,
    resolve_nccl,
)


def test_pcie_profile():
    assert resolve_nccl("pcie") == {
        "NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
    assert resolve_nccl("none") == {} and resolve_nccl(None) == {}


def test_explicit_values_are_normalized_to_strings_and_nccl_spelling():
    assert resolve_nccl({"NCCL_P2P_LEVEL": "pxb", "NCCL_NTHREADS": 256, "NCCL_PROTO": "^ll128",
                         "NCCL_ALGO": "tree,ring", "NCCL_P2P_DISABLE": True, "NCCL_SOCKET_IFNAME": "eth0"}) == {
        "NCCL_P2P_LEVEL": "PXB", "NCCL_NTHREADS": "256", "NCCL_PROTO": "^ll128", "NCCL_ALGO": "tree,ring",
        "NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert resolve_nccl({"NCCL_P2P_LEVEL": 3}) == {"NCCL_P2P_LEVEL": "3"}


def test_profile_as_base_with_overrides():
    env = resolve_nccl({"profile": "pcie", "NCCL_BUFFSIZE": 8388608})
    assert env["NCCL_BUFFSIZE"] == "8388608" and env["NCCL_ALGO"] == "Ring"


@pytest.mark.parametrize("setting, expected", [
    ({"NCCL_NTHREADS": 100}, "NCCL_NTHREADS='100' is not valid; use one of 64, 128, 256, 512"),
    ({"NCCL_P2P_LEVEL": "NVLINK"}, ("NCCL_P2P_LEVEL='NVLINK' is not valid; use one of LOC, NVL, PIX, PXB, PHB, SYS or a "
                                    "legacy level 0-5")),
    ({"NCCL_P2P_LEVEL": 6}, "NCCL_P2P_LEVEL='6'"),
    ({"NCCL_PROTO": "LL,Fast"}, "NCCL_PROTO='LL,Fast': 'Fast' is not valid; use a comma list of LL, LL128, Simple"),
    ({"NCCL_ALGO": "^"}, "NCCL_ALGO='^' is not valid"),
    ({"NCCL_ALGO": "Ring,,Tree"}, "NCCL_ALGO='Ring,,Tree' is not valid"),
    ({"NCCL_BUFFSIZE": "16M"}, "NCCL_BUFFSIZE='16M' is not valid; use a positive integer"),
    ({"NCCL_BUFFSIZE": 0}, "NCCL_BUFFSIZE='0' is not valid"),
    ({"NCCL_MIN_NCHANNELS": 64}, "use a positive integer up to 32"),
    ({"PROTO": "LL"}, "'PROTO' is not an NCCL variable"),
    ("infiniband", "unknown NCCL profile 'infiniband'; use one of none, pcie"),
    ({"profile": "nvlink"}, "unknown NCCL profile 'nvlink'"),
    (["NCCL_PROTO=LL"], "NCCL settings must be a profile name"),
])
def test_bad_values_name_the_value_and_what_is_accepted(setting, expected):
    with pytest.raises(NcclError) as error:
        resolve_nccl(setting)
    assert expected in str(error.value)
