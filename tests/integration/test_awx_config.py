"""AWX / Automation Controller configuration as code, validated statically (there is no AWX server here).

- meta/execution-environment.yml: a real ``ansible-builder create`` writes a valid build context; the context's
  own introspection script resolves the requirements of the collections the image gets, and pip resolves them
  (with this collection's pins) against PyPI.
- playbooks/awx_configure.yml: ``ansible-playbook --syntax-check`` and ``ansible-lint --profile production`` with
  the awx.awx collection taken from the ansible 13 package (scripts/fetch_awx_collection.sh), and every task
  argument checked against the awx.awx module's documented options.
- meta/awx/surveys/*.json: valid AWX survey specs, consistent with the roles' argument specs and ranges, asking what
  operators need (no template asks for variables on launch: that would be root on every GPU host for anyone who may
  launch it).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from .conftest import BIN_DIR, REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "collections"))
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import (
    as_boolean,
    boolean_problem,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    MAMBA_STRATEGIES,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.role_options import (
    BOOLEAN_OPTIONS,
    ROLE_OPTION_RANGES,
    option_problems,
    value_problem,
)

META = os.path.join(REPO_ROOT, "meta")
SURVEY_DIR = os.path.join(META, "awx", "surveys")
PLAYBOOK = os.path.join(REPO_ROOT, "playbooks", "awx_configure.yml")
AWX_VARS = os.path.join(META, "awx", "awx_vars.yml")
# The survey of each template, and the argument spec entry point of the role its playbook runs.
SURVEY_SPECS = {"relaunch.json": ("relaunch", "main"), "stop.json": ("relaunch", "stop"),
                "deploy.json": ("launch_scripts", "main")}
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
# AWX passes a multiplechoice answer as a string: a bool option gets "true"/"false", which the roles read with | bool.
COMPATIBLE = {"integer": {"int", "float"}, "float": {"float"}, "multiplechoice": {"str", "bool"},
              "text": {"str", "list", "raw"}, "textarea": {"str"}}
# What operators used to pass as free-form extra vars on a launch, now survey questions (the hosts: the Limit).
NEEDED_QUESTIONS = {
    "relaunch.json": {"relaunch_state", "relaunch_only_servers", "relaunch_batch_size", "relaunch_wait_timeout",
                      "relaunch_stall_timeout", "relaunch_rollback", "relaunch_canary", "relaunch_lock_timeout",
                      "relaunch_take_over_run", "relaunch_expect_min_running_requests",
                      "relaunch_expect_min_total_tokens"},
    "stop.json": {"relaunch_stop_timeout", "relaunch_lock_timeout", "relaunch_take_over_run"},
}
# The secrets AWX credentials inject as extra vars: the servers' key and the router's.
INJECTED_SECRETS = {"sglang_api_key", "sglang_router_api_key"}


def constraint(name):
    with open(os.path.join(REPO_ROOT, "requirements", "constraints.txt")) as handle:
        return re.search(rf"^{re.escape(name)}==(\S+)$", handle.read(), re.MULTILINE).group(1)


class AnsibleLoader(yaml.SafeLoader):
    """YAML as Ansible reads it, ``!unsafe`` (a string never templated) included."""


AnsibleLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load_yaml(path):
    with open(path) as handle:
        return yaml.load(handle, Loader=AnsibleLoader)


def surveys():
    found = {}
    for path in sorted(glob.glob(f"{SURVEY_DIR}/*.json")):
        with open(path) as handle:
            found[os.path.basename(path)] = json.load(handle)
    return found


def trusted(value):
    """YAML data as Ansible templates it (2.19+ templates only strings trusted as templates)."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def rendered(value, variables):
    """``value`` (task arguments or a condition) templated with ``variables`` as ansible-playbook would."""
    templar = Templar(loader=DataLoader(), variables=trusted(variables))
    if isinstance(value, str) and "{{" not in value:
        return templar.evaluate_conditional(trust_as_template(value))
    return templar.template(trusted(value))


def role_options(role, entry_point):
    return load_yaml(os.path.join(REPO_ROOT, "roles", role, "meta", "argument_specs.yml"))[
        "argument_specs"][entry_point]["options"]


def pypi_reachable():
    probe = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "-d", os.path.join(REPO_ROOT, ".work", "pip-cache"), "six"],
                           capture_output=True, text=True, timeout=120, check=False)
    return probe.returncode == 0


# --- surveys -------------------------------------------------------------------------------------------------

def test_surveys_are_valid_awx_survey_specs():
    found = surveys()
    assert set(found) == set(SURVEY_SPECS)
    for name, survey in found.items():
        assert isinstance(survey["name"], str) and survey["name"] and isinstance(survey["description"], str)
        assert isinstance(survey["spec"], list) and survey["spec"], name
        variables = [question["variable"] for question in survey["spec"]]
        assert len(variables) == len(set(variables)), f"{name}: a variable asked twice"
        for question in survey["spec"]:
            where = f"{name}: {question.get('variable')}"
            assert {"question_name", "variable", "type", "required"} <= set(question), where
            assert question["type"] in SURVEY_TYPES, where
            assert isinstance(question["required"], bool), where
            assert re.fullmatch(r"[a-z_][a-z0-9_]*", question["variable"]), where
            default = question.get("default", "")
            if question["type"] in ("integer", "float"):
                kind = int if question["type"] == "integer" else (int, float)
                assert isinstance(question["min"], kind) and isinstance(question["max"], kind), where
                assert question["min"] <= question["max"], where
                if default != "" or question["required"]:
                    assert isinstance(default, kind) and question["min"] <= default <= question["max"], where
            if question["type"] in ("multiplechoice", "multiselect"):
                assert isinstance(question["choices"], list) and question["choices"], where
                assert default in question["choices"] or (default == "" and not question["required"]), where


def test_no_survey_asks_for_a_secret():
    for name, survey in surveys().items():
        for question in survey["spec"]:
            assert question["type"] != "password", f"{name}: secrets come from credentials"
            # Token counts (max_total_num_tokens) are not secrets; API keys and access tokens are.
            assert not re.search(r"api_key|_token\b|^token", question["variable"]), name


@pytest.mark.parametrize("survey_name", sorted(SURVEY_SPECS))
def test_survey_variables_match_the_role_argument_specs_and_ranges(survey_name):
    options = role_options(*SURVEY_SPECS[survey_name])
    for question in surveys()[survey_name]["spec"]:
        variable, survey_type = question["variable"], question["type"]
        where = f"{survey_name}: {variable}"
        assert variable in options, f"{where} is no option of {SURVEY_SPECS[survey_name]}"
        spec = options[variable]
        assert spec.get("type", "str") in COMPATIBLE[survey_type], f"{where}: {survey_type} -> {spec.get('type')}"
        if survey_type == "multiplechoice" and spec.get("type") == "bool":
            # The answer arrives as a string: the role's check must take each choice, and both meanings offered.
            assert variable in BOOLEAN_OPTIONS, f"{where}: a string for a bool the role does not check"
            assert all(boolean_problem(variable, choice) is None for choice in question["choices"]), where
            assert {as_boolean(choice) for choice in question["choices"]} == {True, False}, where
            assert as_boolean(question["default"]) == spec["default"], f"{where}: the default changes the role's"
        elif survey_type == "multiplechoice":
            allowed = spec.get("choices")
            if variable == "sglang_mamba_scheduler_strategy":
                allowed = MAMBA_STRATEGIES
            if allowed:
                assert set(question["choices"]) <= set(allowed), where
            if "default" in spec and spec["default"] is not None and question["required"]:
                assert spec["default"] in question["choices"], where
        if survey_type in ("integer", "float"):
            option_range = ROLE_OPTION_RANGES.get(variable)
            assert option_range is not None, f"{where}: no range in plugin_utils/role_options.py"
            values = [question["min"], question["max"]]
            values += [question["default"]] if question.get("default", "") != "" else []
            for value in values:
                assert value_problem(variable, value, option_range) is None, (where, value)
            # The role's own default is a valid answer too (the survey does not force a narrower default).
            if question.get("default", "") != "" and spec.get("default") is not None:
                assert question["min"] <= spec["default"] <= question["max"], where


def test_the_surveys_ask_what_operators_changed_with_extra_vars():
    for name, needed in NEEDED_QUESTIONS.items():
        asked = {question["variable"] for question in surveys()[name]["spec"]}
        assert needed <= asked, f"{name} no longer asks for {sorted(needed - asked)}"
    # The answers a survey can give pass the role's own checks (ranges, booleans), its defaults included.
    for name, survey in surveys().items():
        for question in survey["spec"]:
            # A text question's min and max are lengths, its default an answer.
            answers = question.get("choices") or [question[key] for key in ("min", "max", "default")
                                                  if question.get(key, "") != ""
                                                  and (question["type"] != "text" or key == "default")]
            for answer in answers:
                assert option_problems({question["variable"]: answer}) == [], (name, question["variable"], answer)


# --- awx_configure.yml -----------------------------------------------------------------------------------------

def awx_tasks(module):
    return [task for task in load_yaml(PLAYBOOK)[0]["tasks"] if f"awx.awx.{module}" in task]


def test_no_template_asks_for_variables_on_launch():
    """Anything at launch but the survey's answers (ansible_*, sglang_server_command, ...) is root on the hosts."""
    templates = [task["awx.awx.job_template"] for task in awx_tasks("job_template")]
    workflows = [task["awx.awx.workflow_job_template"] for task in awx_tasks("workflow_job_template")]
    assert templates and workflows
    for template in templates + workflows:
        # Set, not left out: the next run of the playbook undoes a change made in AWX's UI.
        assert template["ask_variables_on_launch"] is False, template["name"]
        prompts = {key: value for key, value in template.items() if key.startswith("ask_") and value is not False}
        assert prompts == {"ask_limit_on_launch": True}, f"{template['name']}: {prompts}"
    # A workflow's extra vars reach its jobs whatever the job templates allow (AWX's exception to its prompting rules).
    assert all(workflow["extra_vars"] == {} for workflow in workflows)
    awx_vars = load_yaml(AWX_VARS)
    options = role_options("relaunch", "main")
    for template in awx_vars["awx_job_templates"]:
        assert not [key for key in template if key.startswith("ask_")], f"{template['name']}: a prompt switch"
        variables = rendered(templates[0]["extra_vars"], dict(awx_vars, item=template))
        # Fixed variables are role options with valid values (a typo would be a silent no-op).
        assert set(variables) <= set(options), template["name"]
        assert option_problems(variables) == [], template["name"]
        assert template.get("restricted") in (None, True), f"{template['name']}: restricted is only ever true"


def test_restricted_templates_are_launched_by_admins_only():
    awx_vars = dict(load_yaml(AWX_VARS), awx_operator_teams=["ops"], awx_admin_teams=["gpu-admins"])
    restricted = {template["name"] for template in awx_vars["awx_job_templates"] if template.get("restricted")}
    # Killing processes that are not this deployment's is an admin's decision.
    forcing = {template["name"] for template in awx_vars["awx_job_templates"]
               if template.get("extra_vars", {}).get("relaunch_force_kill_gpu_holders")}
    assert forcing and forcing <= restricted
    grants = {}
    for task in awx_tasks("role"):
        assert rendered(task["when"], awx_vars) is True
        grant = rendered(task["awx.awx.role"], awx_vars)
        assert grant["role"] == "execute"
        for team in grant["teams"]:
            grants.setdefault(team, set()).update(grant.get("job_templates", []), grant.get("workflows", []))
    everyday = {template["name"] for template in awx_vars["awx_job_templates"]} - restricted
    assert grants["ops"] == everyday | {awx_vars["awx_workflow"]}
    assert grants["gpu-admins"] == grants["ops"] | restricted
    # The workflow, launched by operators, runs no restricted template.
    workflow = awx_tasks("workflow_job_template")[0]["awx.awx.workflow_job_template"]
    assert not {node["unified_job_template"]["name"] for node in workflow["workflow_nodes"]} & restricted
    # No team given: no grant is attempted.
    nobody = dict(awx_vars, awx_operator_teams=[], awx_admin_teams=[])
    assert not any(rendered(task["when"], nobody) for task in awx_tasks("role"))


def test_credential_types_inject_the_keys_the_roles_keep_secret():
    injected = {}
    for task in awx_tasks("credential_type"):
        credential_type = task["awx.awx.credential_type"]
        assert "when" not in task, f"{credential_type['name']}: always created"
        fields = {field["id"]: field for field in credential_type["inputs"]["fields"]}
        for variable, value in credential_type["injectors"].get("extra_vars", {}).items():
            field = re.fullmatch(r"\{\{ (\w+) \}\}", value).group(1)
            assert fields[field].get("secret") is True and field in credential_type["inputs"]["required"], variable
            injected[variable] = credential_type["name"]
    assert set(injected) == INJECTED_SECRETS
    for variable in injected:
        for role, entry_point in (("relaunch", "main"), ("relaunch", "stop"), ("relaunch", "status")):
            assert role_options(role, entry_point)[variable].get("no_log") is True, (variable, entry_point)

    # The router key: its own type and credential (logged nowhere), given to every template when enabled.
    awx_vars = load_yaml(AWX_VARS)
    assert rendered(injected["sglang_router_api_key"], awx_vars) == "SGLang router API key"
    credential = next(task for task in awx_tasks("credential")
                      if task["awx.awx.credential"]["name"] == "{{ awx_router_api_key_credential }}")
    assert credential["no_log"] is True
    assert credential["awx.awx.credential"]["credential_type"] == "{{ awx_router_api_key_credential_type }}"
    template = awx_tasks("job_template")[0]["awx.awx.job_template"]
    for enabled in (False, True):
        credentials = rendered(template["credentials"], dict(awx_vars, awx_router_api_key_enabled=enabled))
        assert ("SGLang router API key" in credentials) is enabled and "SGLang API key" in credentials
        assert rendered(credential["when"], dict(awx_vars, awx_router_api_key_enabled=enabled,
                                                 awx_sglang_router_api_key="sk-router")) is enabled


@pytest.fixture(scope="module")
def awx_collection():
    """ANSIBLE_COLLECTIONS_PATH holding only awx.awx (from the ansible 13 package on PyPI) and this collection."""
    fetched = subprocess.run([os.path.join(REPO_ROOT, "scripts", "fetch_awx_collection.sh")],
                             capture_output=True, text=True, timeout=300, check=False,
                             env=dict(os.environ, PYTHON=sys.executable))
    if fetched.returncode == 3:
        pytest.skip(f"awx.awx not available: PyPI unreachable ({fetched.stderr.strip()[-200:]})")
    assert fetched.returncode == 0, fetched.stderr
    path = fetched.stdout.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(path, "ansible_collections", "awx", "awx", "MANIFEST.json"))
    return path


def awx_env(awx_collection):
    return dict(os.environ, PATH=BIN_DIR + os.pathsep + os.environ["PATH"],
                ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([awx_collection, os.path.join(REPO_ROOT, "collections")]))


def test_awx_configure_passes_syntax_check_and_ansible_lint(awx_collection, tmp_path):
    env = awx_env(awx_collection)
    # The repository's .ansible-lint excludes this playbook (make lint has no awx.awx): lint it with the same
    # rules but without that exclusion.
    config = tmp_path / "ansible-lint.yml"
    with open(os.path.join(REPO_ROOT, ".ansible-lint")) as handle:
        rules = yaml.safe_load(handle)
    rules["exclude_paths"] = [path for path in rules["exclude_paths"] if path != "playbooks/awx_configure.yml"]
    config.write_text(yaml.safe_dump(rules))
    syntax = subprocess.run([os.path.join(BIN_DIR, "ansible-playbook"), "--syntax-check", PLAYBOOK], cwd=REPO_ROOT,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    # One ansible-lint at a time prepares <repo>/.ansible: `make lint` may be running beside this test (Makefile).
    os.makedirs(os.path.join(REPO_ROOT, ".work"), exist_ok=True)
    lint = subprocess.run(["flock", os.path.join(REPO_ROOT, ".work", "ansible-lint.lock"),
                           os.path.join(BIN_DIR, "ansible-lint"), "-c", str(config), "--profile", "production", "--offline",
                           PLAYBOOK, AWX_VARS, os.path.join(META, "awx", "inventory", "gpu.proxmox.yml"),
                           os.path.join(META, "execution-environment.yml")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def module_options(awx_collection, module):
    """Documented option names (and aliases) of an awx.awx module, from its DOCUMENTATION."""
    path = os.path.join(awx_collection, "ansible_collections", "awx", "awx", "plugins", "modules", f"{module}.py")
    with open(path) as handle:
        source = handle.read()
    documentation = yaml.safe_load(re.search(r'DOCUMENTATION = r?(\'\'\'|""")(.*?)\1', source, re.DOTALL).group(2))
    names = set(documentation["options"])
    for option in documentation["options"].values():
        names.update(option.get("aliases", []))
    fragments = documentation.get("extends_documentation_fragment", [])
    return names | ({"controller_host", "controller_username", "controller_password", "controller_oauthtoken",
                     "validate_certs", "controller_config_file", "request_timeout"} if fragments else set())


def test_awx_configure_defines_the_templates_the_issue_asks_for(awx_collection):
    tasks = load_yaml(PLAYBOOK)[0]["tasks"]
    awx_vars = load_yaml(AWX_VARS)
    modules = {}
    for task in tasks:
        module = next(key for key in task if key.startswith("awx.awx."))
        options = module_options(awx_collection, module.split(".")[-1])
        assert set(task[module]) <= options, f"{task['name']}: unknown {set(task[module]) - options}"
        modules.setdefault(module.split(".")[-1], []).append(task)
    for needed in ("project", "inventory", "inventory_source", "credential_type", "credential", "job_template",
                   "workflow_job_template"):
        assert needed in modules, needed

    # The API key: a secret field injected as the extra var the roles read; the credential task logs nothing.
    api_type = next(task["awx.awx.credential_type"] for task in modules["credential_type"]
                    if task["awx.awx.credential_type"]["name"] == "{{ awx_api_key_credential_type }}")
    assert api_type["inputs"]["fields"] == [{"id": "sglang_api_key", "type": "string", "label": "SGLang API key",
                                             "secret": True}]
    assert set(api_type["injectors"]) == {"extra_vars"} and "sglang_api_key" in api_type["injectors"]["extra_vars"]
    assert all(task.get("no_log") is True for task in modules["credential"])

    # Job templates: the four playbooks, limit on launch, no simultaneous runs, a timeout above the waits.
    template_task = modules["job_template"][0]["awx.awx.job_template"]
    assert template_task["ask_limit_on_launch"] is True and template_task["allow_simultaneous"] is False
    assert template_task["job_slice_count"] == "{{ awx_job_slice_count | int }}" and awx_vars["awx_job_slice_count"] == 1
    templates = {template["name"]: template for template in awx_vars["awx_job_templates"]}
    assert {template["playbook"] for template in templates.values()} == {
        "playbooks/relaunch.yml", "playbooks/status.yml", "playbooks/stop.yml", "playbooks/deploy.yml"}
    for template in templates.values():
        assert os.path.isfile(os.path.join(REPO_ROOT, template["playbook"]))
        if "survey" in template:
            assert os.path.isfile(os.path.join(SURVEY_DIR, template["survey"]))
    wait_max = next(question["max"] for question in surveys()["relaunch.json"]["spec"]
                    if question["variable"] == "relaunch_wait_timeout")
    assert awx_vars["awx_relaunch_timeout"] > wait_max

    # Inventory source: the community.proxmox plugin from a file of the project.
    source = modules["inventory_source"][0]["awx.awx.inventory_source"]
    assert source["source"] == "scm"
    inventory_file = os.path.join(REPO_ROOT, awx_vars["awx_inventory_source_path"])
    assert load_yaml(inventory_file)["plugin"] == "community.proxmox.proxmox"
    assert inventory_file.endswith("proxmox.yml")  # the plugin's verify_file accepts only such names

    # Workflow: relaunch, then status always.
    workflow = modules["workflow_job_template"][0]["awx.awx.workflow_job_template"]
    nodes = {node["identifier"]: node for node in workflow["workflow_nodes"]}
    assert nodes["relaunch"]["unified_job_template"]["name"] in templates
    assert nodes["relaunch"]["related"]["always_nodes"] == [{"identifier": "status"}]
    assert nodes["status"]["unified_job_template"]["name"] == "SGLang status"
    assert "SGLang status" in templates
    assert workflow["allow_simultaneous"] is False and workflow["ask_limit_on_launch"] is True
    assert "'../meta/awx/surveys/relaunch.json'" in workflow["survey_spec"], "the relaunch node's questions"


# --- execution environment -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ee_context(tmp_path_factory):
    """``ansible-builder create`` of meta/execution-environment.yml, with the collection tarball it installs."""
    work = tmp_path_factory.mktemp("ee")
    shutil.copytree(META, work / "meta")
    built = subprocess.run([os.path.join(BIN_DIR, "ansible-galaxy"), "collection", "build", "--force",
                            "--output-path", str(work / "build"), REPO_ROOT],
                           capture_output=True, text=True, timeout=300, check=False, cwd=REPO_ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    created = subprocess.run([os.path.join(BIN_DIR, "ansible-builder"), "create", "-f",
                              "meta/execution-environment.yml", "--context", "context", "--output-filename",
                              "Containerfile", "-v", "3"], cwd=work, capture_output=True, text=True, timeout=120,
                             check=False)
    assert created.returncode == 0, created.stdout + created.stderr
    return work


def test_the_collection_tarball_holds_only_files_of_the_repository(ee_context):
    """What ships is what we mean to ship: no test caches (.hypothesis), pid files or local state - every file of the
    tarball is one git tracks (or would: new, not ignored), besides the collection's own MANIFEST.json/FILES.json."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    [tarball] = (ee_context / "build").glob("*.tar.gz")
    with tarfile.open(tarball) as archive:
        shipped = {member.name for member in archive.getmembers() if member.isfile()}
    assert shipped - set(listed) == {"MANIFEST.json", "FILES.json"}
    assert "plugins/modules/server.py" in shipped


def test_ansible_builder_creates_a_valid_build_context(ee_context):
    context = ee_context / "context"
    containerfile = (context / "Containerfile").read_text()
    assert f'ANSIBLE_INSTALL_REFS="ansible-core=={constraint("ansible-core")} ' \
           f'ansible-runner=={constraint("ansible-runner")}"' in containerfile
    assert "introspect.py introspect --user-pip=requirements.txt --user-bindep=bindep.txt" in containerfile
    # This collection is installed after the introspection, from the tarball in the context.
    final = containerfile.split("FROM base AS final")[1]
    assert "ansible-galaxy collection install --offline --no-deps" in final
    assert "ENV ANSIBLE_CALLBACKS_ENABLED=gpuops.sglang.preload" in final
    tarballs = os.listdir(context / "_build" / "collection")
    assert tarballs == [f"gpuops-sglang-{load_yaml(os.path.join(REPO_ROOT, 'galaxy.yml'))['version']}.tar.gz"]
    galaxy = load_yaml(context / "_build" / "requirements.yml")
    assert galaxy == {"collections": [{"name": "community.proxmox", "version": constraint_of_proxmox()}]}
    python = (context / "_build" / "requirements.txt").read_text()
    assert f"paramiko=={constraint('paramiko')}" in python.splitlines()
    # bindep parses the system requirements (a syntax error would fail here).
    listed = subprocess.run([os.path.join(BIN_DIR, "bindep"), "-f", str(context / "_build" / "bindep.txt"), "-l",
                             "newline", "--profiles"], capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stdout + listed.stderr


# community.proxmox as the `ansible` package of requirements/constraints.txt ships it.
PROXMOX_DIR = os.path.join(sysconfig.get_paths()["purelib"], "ansible_collections", "community", "proxmox")


def constraint_of_proxmox():
    with open(os.path.join(PROXMOX_DIR, "MANIFEST.json")) as handle:
        return json.load(handle)["collection_info"]["version"]


def test_the_requirements_resolve_like_in_the_image(ee_context, tmp_path):
    """The context's introspect.py over the collections the galaxy stage installs, then pip resolves the result."""
    collections = tmp_path / "collections" / "ansible_collections" / "community"
    collections.mkdir(parents=True)
    os.symlink(PROXMOX_DIR, collections / "proxmox")
    build = ee_context / "context" / "_build"
    written_pip, written_bindep = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    introspected = subprocess.run([sys.executable, str(build / "scripts" / "introspect.py"), "introspect",
                                   str(tmp_path / "collections"), "--user-pip", str(build / "requirements.txt"),
                                   "--user-bindep", str(build / "bindep.txt"), "--write-pip", str(written_pip),
                                   "--write-bindep", str(written_bindep)],
                                  capture_output=True, text=True, timeout=60, check=False)
    assert introspected.returncode == 0, introspected.stdout + introspected.stderr
    requirements = written_pip.read_text()
    assert re.search(r"^paramiko==", requirements, re.MULTILINE) and re.search(r"^proxmoxer", requirements, re.MULTILINE), requirements
    assert "openssh" in written_bindep.read_text()

    if not pypi_reachable():
        pytest.skip("PyPI unreachable: requirements introspected but not resolved")
    report = tmp_path / "report.json"
    resolved = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
         "--only-binary=:all:", "--python-version", "3.12", "--platform", "manylinux2014_x86_64",
         "--target", str(tmp_path / "target"), "-r", str(written_pip),
         f"ansible-core=={constraint('ansible-core')}", f"ansible-runner=={constraint('ansible-runner')}"],
        capture_output=True, text=True, timeout=300, check=False)
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    with open(report) as handle:
        installed = json.load(handle)["install"]
    versions = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installed}
    assert versions["paramiko"] == constraint("paramiko")
    assert versions["ansible-core"] == constraint("ansible-core")
    assert "proxmoxer" in versions and "requests" in versions
