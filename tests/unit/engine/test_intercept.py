"""Forward interception: listeners see inputs and output, the module's __dict__ is restored exactly,
sessions share a module, other libraries' wrappers survive, copies are pass-throughs."""

from __future__ import annotations

import copy
import functools
import io
import threading

import pytest
import torch
from torch import nn

from yamltrace.engine import Interception


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(2.0))
        self.fail = False

    def forward(self, x: torch.Tensor, *, shift: float = 0.0) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("on purpose")
        return x * self.weight + shift


def recorder(log: list):
    def listener(context, args, kwargs, output):
        log.append((context, args, dict(kwargs), output))

    return listener


def test_listener_sees_context_inputs_and_output_and_the_dict_is_restored() -> None:
    module, log, x = Scale(), [], torch.ones(2)
    before = dict(module.__dict__)
    handle = Interception().add([(module, recorder(log), "ctx")])
    out = module(x, shift=1.0)
    assert torch.equal(out, torch.full((2,), 3.0))
    ((context, args, kwargs, output),) = log
    assert context == "ctx" and args[0] is x and kwargs == {"shift": 1.0} and output is out
    handle.remove()
    handle.remove()  # idempotent
    assert module.__dict__ == before and "forward" not in module.__dict__
    module(x)
    assert len(log) == 1


def test_two_sessions_share_a_module_and_each_removal_takes_only_its_listener() -> None:
    module, first, second = Scale(), [], []
    a = Interception().add([(module, recorder(first), "a")])
    b = Interception().add([(module, recorder(second), "b")])
    module(torch.ones(1))
    a.remove()
    module(torch.ones(1))
    assert [c for c, *_ in first] == ["a"] and [c for c, *_ in second] == ["b", "b"]
    assert len(module._forward_hooks) == 1  # one interceptor for both
    b.remove()
    assert not module._forward_hooks and "forward" not in module.__dict__


def test_an_existing_instance_forward_is_called_and_put_back() -> None:
    module, log = Scale(), []
    own = functools.partial(Scale.forward, module, shift=10.0)
    module.forward = own
    handle = Interception().add([(module, recorder(log), None)])
    assert torch.equal(module(torch.ones(1)), torch.tensor([12.0]))
    handle.remove()
    assert module.__dict__["forward"] is own and len(log) == 1


@pytest.mark.parametrize("wraps", [True, False])
def test_a_wrapper_set_over_ours_keeps_working_after_removal(wraps: bool) -> None:
    module, log, calls = Scale(), [], []
    handle = Interception().add([(module, recorder(log), None)])
    inner = module.forward

    def theirs(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)

    wrapper = functools.wraps(inner)(theirs) if wraps else theirs
    module.forward = wrapper
    module(torch.ones(1))
    handle.remove()
    assert module.__dict__["forward"] is wrapper
    assert torch.equal(module(torch.ones(1)), torch.tensor([2.0]))
    assert len(calls) == 2 and len(log) == 1  # ours passes through, records nothing
    again = Interception().add([(module, recorder(log), None)])
    module(torch.ones(1))
    again.remove()
    assert len(log) == 2 and len(calls) == 3


def test_an_exception_in_forward_skips_listeners_and_removal_still_restores() -> None:
    module, log = Scale(), []
    module.fail = True
    handle = Interception().add([(module, recorder(log), None)])
    with pytest.raises(RuntimeError, match="on purpose"):
        module(torch.ones(1))
    handle.remove()
    assert log == [] and "forward" not in module.__dict__


def test_a_deep_copy_made_while_intercepted_runs_its_own_weights_and_records_nothing() -> None:
    module, log = Scale(), []
    handle = Interception().add([(module, recorder(log), None)])
    twin = copy.deepcopy(module)
    with torch.no_grad():
        twin.weight.fill_(5.0)
    assert torch.equal(twin(torch.ones(1)), torch.tensor([5.0]))
    assert log == []
    assert torch.equal(module(torch.ones(1)), torch.tensor([2.0])) and len(log) == 1
    handle.remove()


def test_a_module_pickled_while_intercepted_loads_as_a_pass_through() -> None:
    module, log = Scale(), []
    handle = Interception().add([(module, recorder(log), None)])
    buffer = io.BytesIO()
    torch.save(module, buffer)
    handle.remove()
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert torch.equal(loaded(torch.ones(1)), torch.tensor([2.0])) and log == []


def test_concurrent_installs_and_removals_leave_nothing_behind() -> None:
    modules = [Scale() for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        try:
            barrier.wait()
            for _ in range(200):
                log: list = []
                handle = Interception().add([(m, recorder(log), None) for m in modules])
                for m in modules:
                    m(torch.ones(1))
                handle.remove()
                assert len(log) >= len(modules)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert not any("forward" in m.__dict__ for m in modules)


def test_listeners_see_inputs_after_pre_hooks_and_outputs_after_forward_hooks() -> None:
    # What the caller receives: a forward hook of someone else's (a steering hook) is seen.
    module, log = Scale(), []
    module.register_forward_pre_hook(lambda m, args: (args[0] + 1,))
    foreign = module.register_forward_hook(lambda m, args, output: output * 100)
    handle = Interception().add([(module, recorder(log), None)])
    returned = module(torch.ones(1))
    handle.remove()
    ((_, args, _, output),) = log
    assert torch.equal(args[0], torch.tensor([2.0]))  # the pre-hook's input
    assert torch.equal(output, torch.tensor([400.0]))  # what the forward hook returned
    assert torch.equal(returned, torch.tensor([400.0]))
    assert list(module._forward_hooks) == [foreign.id] and "forward" not in module.__dict__


def test_listeners_alone_take_one_forward_hook_and_leave_the_instance_forward_alone() -> None:
    module, log = Scale(), []
    handle = Interception().add([(module, recorder(log), None)])
    assert len(module._forward_hooks) == 1 and not module._forward_pre_hooks and "forward" not in module.__dict__
    module(torch.ones(1))
    handle.remove()
    assert len(log) == 1 and "forward" not in module.__dict__


def test_edits_change_what_the_module_receives_and_returns_before_listeners_see_it() -> None:
    module, log = Scale(), []
    inputs = lambda args, kwargs: ((args[0] * 10,), kwargs)  # noqa: E731
    outputs = lambda output: output + 1  # noqa: E731
    handle = Interception().add([(module, recorder(log), None)], edits=[(module, "inputs", inputs), (module, "outputs", outputs)])
    returned = module(torch.ones(1))
    assert len(module._forward_hooks) == 1 and len(module._forward_pre_hooks) == 1 and "forward" not in module.__dict__
    handle.remove()
    ((_, args, _, output),) = log
    assert torch.equal(args[0], torch.tensor([10.0])) and torch.equal(output, torch.tensor([21.0]))
    assert torch.equal(returned, output) and "forward" not in module.__dict__
    assert torch.equal(module(torch.ones(1)), torch.tensor([2.0]))


def test_frames_wrap_the_forward_and_its_listeners_and_exit_in_reverse_also_on_errors() -> None:
    module, log = Scale(), []

    def frame(name: str):
        def enter(args, kwargs):
            log.append(("enter", name))
            return name

        def exit(token, output, finished):
            log.append(("exit", token, None if output is None else output.tolist(), finished))

        return module, enter, exit

    before = dict(module.__dict__)
    handle = Interception().add(
        [(module, lambda c, a, k, o: log.append(("listener", o.tolist())), None)], [frame("a"), frame("b")]
    )
    module(torch.ones(1))
    assert log == [("enter", "a"), ("enter", "b"), ("listener", [2.0]), ("exit", "b", [2.0], True), ("exit", "a", [2.0], True)]
    del log[:]
    module.fail = True
    with pytest.raises(RuntimeError, match="on purpose"):
        module(torch.ones(1))
    assert log == [("enter", "a"), ("enter", "b"), ("exit", "b", None, False), ("exit", "a", None, False)]
    handle.remove()
    module.fail = False
    assert module.__dict__ == before


def test_on_the_slower_path_input_edits_reach_the_forward_the_hooks_and_the_listeners() -> None:
    module, log, seen = Scale(), [], []
    foreign = module.register_forward_hook(lambda m, args, output: seen.append(args[0]) or output + 1)
    double = lambda args, kwargs: ((args[0] * 2,), kwargs)  # noqa: E731
    handle = Interception().add([(module, recorder(log), None)], edits=[(module, "inputs", double)])
    returned = module(torch.ones(1))
    handle.remove()
    ((_, args, _, output),) = log
    assert torch.equal(seen[0], torch.tensor([2.0])) and torch.equal(args[0], torch.tensor([2.0]))
    assert torch.equal(output, torch.tensor([5.0])) and torch.equal(returned, output)
    assert list(module._forward_hooks) == [foreign.id] and not module._forward_pre_hooks
    assert "forward" not in module.__dict__


def test_on_the_slower_path_frames_exit_with_what_the_hooks_returned_and_unfinished_when_one_raised() -> None:
    module, log = Scale(), []
    failing = {"forward hook": False}

    def foreign(m, args, output):
        if failing["forward hook"]:
            raise ValueError("hook on purpose")
        return output * 100

    handle_foreign = module.register_forward_hook(foreign)

    def enter(args, kwargs):
        log.append(("enter", args[0].tolist()))
        return "token"

    def exit(token, output, finished):
        log.append(("exit", token, None if output is None else output.tolist(), finished))

    handle = Interception().add(
        [(module, lambda c, a, k, o: log.append(("listener", o.tolist())), None)], [(module, enter, exit)]
    )
    assert torch.equal(module(torch.ones(1)), torch.tensor([200.0]))
    assert log == [("enter", [1.0]), ("listener", [200.0]), ("exit", "token", [200.0], True)]
    for raising, error in (("forward", RuntimeError), ("forward hook", ValueError)):
        del log[:]
        module.fail, failing["forward hook"] = raising == "forward", raising == "forward hook"
        with pytest.raises(error, match="on purpose"):
            module(torch.ones(1))
        assert log == [("enter", [1.0]), ("exit", "token", None, False)], raising
    handle.remove()
    handle_foreign.remove()
    module.fail, failing["forward hook"] = False, False
    assert not module._forward_hooks and not module._forward_pre_hooks and "forward" not in module.__dict__
    assert not module._forward_hooks_always_called


def test_frames_alone_take_the_slower_path_on_a_module_with_forward_hooks() -> None:
    module, seen = Scale(), []
    foreign = module.register_forward_hook(lambda m, args, output: output + 1)
    handle = Interception().add([], [(module, lambda args, kwargs: None, lambda token, output, finished: seen.append(output))])
    module(torch.ones(1), shift=1.0)
    handle.remove()
    assert seen == [torch.tensor([4.0])] and list(module._forward_hooks) == [foreign.id]
