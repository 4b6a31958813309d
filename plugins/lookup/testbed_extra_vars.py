"""The names of the variables given on the command line with -e (key=value, JSON, YAML or @file)."""

from __future__ import annotations

from ansible.plugins.lookup import LookupBase
from ansible.utils.vars import load_extra_vars

DOCUMENTATION = """
name: testbed_extra_vars
short_description: The names of the variables given with -e
description:
  - The names of the extra variables of this ansible-playbook run, sorted (use query()).
  - playbooks/validate.yml refuses the unknown ones.
author: testbed
"""


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return sorted(load_extra_vars(self._loader))
