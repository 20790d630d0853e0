"""The README's generated-code excerpt must be what the generator really writes."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_is_in_the_generated_file():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- readme-example: (\S+) -->\n```python\n(.*?)```", text, re.DOTALL)
    assert m, "README lost its readme-example marker"
    files = sorted(ROOT.glob(m.group(1)))
    assert len(files) == 1, files
    assert m.group(2) in files[0].read_text()


def test_readme_names_the_ci_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tools/test.sh" in readme and "bash tools/test.sh" in ci
