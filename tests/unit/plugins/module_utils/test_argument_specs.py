"""Each shared argument spec and the doc fragment that documents it say the same: names, types, defaults; and each
module's documented servers[] suboptions are the ones its spec composes from SERVER_IDENTITY."""

import pytest
import yaml
from ansible_collections.gpuops.sglang.plugins.doc_fragments.common import (
    ModuleDocFragment,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    BY_FRAGMENT,
    PROBE_ARGUMENT_SPEC,
    SERVER_IDENTITY,
    WAIT_ARGUMENT_SPEC,
)
from ansible_collections.gpuops.sglang.plugins.modules import (
    probe,
    server,
    server_info,
    wait,
)

DOCUMENTED_KEYS = ("type", "default", "choices", "elements")


@pytest.mark.parametrize("fragment", sorted(BY_FRAGMENT))
def test_the_fragment_documents_exactly_its_spec(fragment):
    documented = yaml.safe_load(getattr(ModuleDocFragment, fragment.rsplit(".", 1)[1].upper()))["options"]
    spec = BY_FRAGMENT[fragment]
    assert sorted(documented) == sorted(spec)
    for name, option in spec.items():
        assert {key: option.get(key) for key in DOCUMENTED_KEYS} == \
            {key: documented[name].get(key) for key in DOCUMENTED_KEYS}, name


# The modules whose ``servers`` option is a list of dicts, composed from SERVER_IDENTITY (servers_option): their
# composed argument spec. Each documents the suboptions itself (a doc fragment cannot carry a list's suboptions).
SERVERS_SPECS = {"wait": WAIT_ARGUMENT_SPEC, "probe": PROBE_ARGUMENT_SPEC, "server": server.ARGUMENT_SPEC,
                 "server_info": server_info.ARGUMENT_SPEC}
MODULES = {"wait": wait, "probe": probe, "server": server, "server_info": server_info}


def _documented_servers(module):
    return yaml.safe_load(MODULES[module].DOCUMENTATION)["options"]["servers"]


def _shape(option):
    return {"type": option.get("type"), "elements": option.get("elements"), "choices": option.get("choices"),
            "default": option.get("default"), "required": bool(option.get("required"))}


@pytest.mark.parametrize("module", sorted(SERVERS_SPECS))
def test_a_modules_documented_servers_suboptions_are_its_spec(module):
    documented, spec = _documented_servers(module), SERVERS_SPECS[module]["servers"]
    assert _shape(documented) == _shape(spec)
    assert sorted(documented["suboptions"]) == sorted(spec["options"])
    for name, option in spec["options"].items():
        assert _shape(documented["suboptions"][name]) == _shape(option), f"{module}: servers[].{name}"


@pytest.mark.parametrize("module", sorted(SERVERS_SPECS))
def test_the_server_identity_is_the_shared_one(module):
    """A module that spelled name, port or log_path itself again would drift from the others."""
    options = SERVERS_SPECS[module]["servers"]["options"]
    assert {key: options[key] for key in SERVER_IDENTITY if key in options} == \
        {key: SERVER_IDENTITY[key] for key in SERVER_IDENTITY if key in options}
    assert "name" in options


def test_every_module_describes_the_server_name_alike():
    descriptions = {module: _documented_servers(module)["suboptions"]["name"]["description"]
                    for module in SERVERS_SPECS}
    first = {module: (text if isinstance(text, str) else text[0]) for module, text in descriptions.items()}
    assert len(set(first.values())) == 1, first
