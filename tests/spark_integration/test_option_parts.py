"""The parts of the source's option parser, each on its own (plain Python, no Spark, no AWS)."""

from __future__ import annotations

import pytest

from spark_integration.errors import InvalidOptionError
from spark_integration.group_options import GROUP_ONLY, KUBERNETES_ONLY, group_options
from spark_integration.option_values import (
    bool_option,
    bytes_option,
    duration_option,
    fail,
    int_option,
    size_option,
    url_option,
)
from spark_integration.options import ROLE_ONLY, STREAM_OPTIONS, assume_role_options


def test_fail_names_the_option() -> None:
    err = fail("maxRecordsPerShard", "is wrong")
    assert isinstance(err, InvalidOptionError)
    assert err.option == "maxRecordsPerShard"
    assert str(err) == "option 'maxRecordsPerShard': is wrong"


def test_values_read_the_lower_cased_key_and_default_when_unset() -> None:
    opts = {"shardsperpartition": " 7 ", "failondataloss": "FALSE", "describeshardinterval": "1.5m"}
    assert int_option(opts, "shardsPerPartition", 1, low=1, high=10) == 7
    assert int_option({"n": "10"}, "N", 1, low=1, high=10) == 10  # the bounds are inclusive
    assert int_option({"n": "1"}, "N", 5, low=1, high=10) == 1
    assert int_option({"shardsperpartition": ""}, "shardsPerPartition", 1, low=1, high=10) == 1
    assert bool_option(opts, "failOnDataLoss", True) is False
    assert bool_option({}, "failOnDataLoss", True) is True
    assert duration_option(opts, "describeShardInterval", 10.0, low=0.0) == 90.0
    assert duration_option({}, "describeShardInterval", 10.0, low=0.0) == 10.0
    assert bytes_option({"x": "0"}, "x", 5, high=10) == 0
    assert bytes_option({}, "x", 5, high=10) == 5
    assert size_option({}, "x", high=10) is None
    assert url_option("https://kinesis.example:443/") == "https://kinesis.example:443"
    assert url_option("") is None


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: int_option({"n": "11"}, "N", 1, low=1, high=10), "use 1..10"),
        (lambda: int_option({"n": "0"}, "N", 1, low=1, high=10), "use 1..10"),
        (lambda: int_option({"n": "x"}, "N", 1, low=1, high=10), "not an integer"),
        (lambda: bool_option({"n": "yes"}, "N", True), "neither 'true' nor 'false'"),
        (lambda: duration_option({"n": "0.2"}, "N", 1.0, low=0.3), "at least 0.3 s"),
        (lambda: duration_option({"n": "5 days"}, "N", 1.0, low=0.0), "not a duration"),
        (lambda: bytes_option({"n": "2k"}, "N", 0, high=1024), "too large"),
        (lambda: size_option({"n": "0"}, "N", high=1 << 30), "out of range"),
        (lambda: url_option("ftp://host", "N"), "is not an http"),
    ],
)
def test_bad_values_name_the_option_in_its_canonical_spelling(call, fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match=fragment) as info:
        call()
    assert info.value.option == "N"


def test_role_options_are_none_without_a_role_and_refuse_their_companions_alone() -> None:
    assert assume_role_options({}) is None
    for name in ROLE_ONLY:
        with pytest.raises(InvalidOptionError, match="only used with 'roleArn'") as info:
            assume_role_options({name.lower(): "x"})
        assert info.value.option == name
    role = assume_role_options({"rolearn": "arn:aws:iam::123456789012:role/r",
                                "stsendpointurl": "http://127.0.0.1:5000/"})
    assert role is not None and role.sts_endpoint_url == "http://127.0.0.1:5000"


def test_group_options_are_none_without_a_table_and_refuse_their_options_alone() -> None:
    assert group_options({}, streaming=True) is None
    for name in GROUP_ONLY:
        with pytest.raises(InvalidOptionError, match="set 'leaseTable' too") as info:
            group_options({name.lower(): "x"}, streaming=True)
        assert info.value.option == name
    for name in KUBERNETES_ONLY:
        with pytest.raises(InvalidOptionError, match="only used with membership=kubernetes"):
            group_options({"leasetable": "t-leases", "applicationname": "app", "membership": "dynamodb",
                           name.lower(): "x"}, streaming=True)


def test_every_option_of_a_part_is_a_known_option() -> None:
    assert set(ROLE_ONLY) | set(GROUP_ONLY) | set(KUBERNETES_ONLY) <= set(STREAM_OPTIONS)
