from kvbench.engines.token_count import _COUNT


def test_count_is_read_from_the_head_of_a_vllm_answer():
    assert int(_COUNT.match(b'{"count":130000,"max_model_len":131072,"tokens":[1,2').group(1)) == 130000
    assert int(_COUNT.match(b'{ "count" : 7 }').group(1)) == 7
    # anything else falls back to a full parse
    assert _COUNT.match(b'{"tokens":[1,2,3]}') is None
    assert _COUNT.match(b'{"count":12x}') is None
