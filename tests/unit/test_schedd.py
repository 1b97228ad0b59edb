"""gahp.schedd: which GAHP the gridmanager starts for a GridResource, the job ids a GridJobId names,
and when an answer of the schedd is trusted as whole (podgahp reap deletes nothing otherwise)."""

from __future__ import annotations

from typing import Dict, List, Optional

import pytest

from gahp.schedd import IncompleteAnswer, check_whole, gahp_job_ids, gahp_type


@pytest.mark.parametrize("grid_resource, expected", [
    ("batch k8s", "k8s"),
    ("batch K8S", "k8s"),          # the gridmanager lower-cases the type and reads K8S_GAHP
    ("batch lancium", "lancium"),
    ("batch Lancium", "lancium"),
    ("batch  k8s", None),          # two spaces: an empty type, then an argument (REMOTE_GAHP)
    ("batch k8s ", None),          # a trailing space is an (empty) argument: REMOTE_GAHP
    (" batch k8s", None),          # not a batch resource
    ("Batch k8s", None),           # "Batch" is not "batch": type "batch", argument k8s (REMOTE_GAHP)
    ("batch\tk8s", None),          # words are split at spaces only
    ("batch k8s remote.example.org", None),
    ("batch", None),
    ("condor ce.example.org ce.example.org:9619", None),
    (None, None),
    (42, None),
], ids=["plain", "upper-type", "lancium", "lancium-capital", "two-spaces", "trailing-space", "leading-space",
        "capital-batch", "tab", "remote", "no-type", "condor", "undefined", "not-a-string"])
def test_the_gahp_is_picked_as_the_gridmanager_picks_it(grid_resource: object, expected: Optional[str]) -> None:
    assert gahp_type(grid_resource) == expected


@pytest.mark.parametrize("grid_job_id, expected", [
    ("batch k8s sb k8s/ns/pilot-0-1", ["k8s/ns/pilot-0-1"]),
    ("batch K8S sb k8s/ns/pilot-0-1", ["k8s/ns/pilot-0-1"]),
    ("batch k8s sb", []),
    ("batch k8s sb k8s/ns/pilot-0-1 extra", ["k8s/ns/pilot-0-1", "extra"]),
    (None, []),
], ids=["plain", "upper", "no-job-yet", "more-words", "undefined"])
def test_job_ids_are_the_fourth_word_of_grid_job_id(grid_job_id: object, expected: List[str]) -> None:
    assert gahp_job_ids(grid_job_id) == expected


def ads(*ids: str) -> List[Dict[str, object]]:
    return [{"GridJobId": f"batch k8s sb{i} {job_id}"} for i, job_id in enumerate(ids)]


@pytest.mark.parametrize("answer, counted, queue_total, advertised, refused", [
    (ads("k8s/ns/a"), 1, 3, 3, None),
    (ads("k8s/ns/a"), 2, 3, 3, "answered with 1 grid jobs but counts 2"),
    (ads(), 0, 0, 5, "answers with an empty queue but its ad counted 5"),
    (ads(), 0, 0, 0, None),
    (ads("k8s/ns/a"), 1, 1, None, "collector has no ad"),
    (ads("k8s/ns/a"), None, None, 1, "no job counts"),
    (ads("k8s/ns/a", "k8s/ns/b"), 1, 2, 2, None),   # a job submitted between the count and the answer
], ids=["whole", "truncated", "emptied-since-advertised", "empty-and-advertised-empty", "no-schedd-ad",
        "no-summary", "grew"])
def test_an_answer_is_trusted_only_when_shown_whole(answer: List[Dict[str, object]], counted: Optional[int],
                                                    queue_total: Optional[int], advertised: Optional[int],
                                                    refused: Optional[str]) -> None:
    if refused is None:
        jobs = check_whole("the local schedd", "ce.example.org", answer, counted, queue_total, advertised)
        assert jobs.jobs == len(answer) and jobs.schedd_name == "ce.example.org"
        assert jobs.job_ids == {str(ad["GridJobId"]).split()[-1] for ad in answer}
    else:
        with pytest.raises(IncompleteAnswer, match=refused):
            check_whole("the local schedd", "ce.example.org", answer, counted, queue_total, advertised)
