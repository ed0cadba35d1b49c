"""Each shared argument spec and the doc fragment that documents it say the same: names, types, defaults."""

import pytest
import yaml
from ansible_collections.gpuops.sglang.plugins.doc_fragments.common import (
    ModuleDocFragment,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    BY_FRAGMENT,
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
