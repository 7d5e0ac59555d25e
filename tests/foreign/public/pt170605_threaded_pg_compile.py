"""Every rank of a threaded process group compiles a functional collective at once (MetricsContext race).

Source: pytorch/pytorch#170605 ("move dynamo MetricsContext into TLS", 2025)
https://github.com/pytorch/pytorch/pull/170605

What the reporter saw (jeffdaily, ROCm CI, 2025-12): test_functional_differentials.py's
test_all_reduce_compile, test_all_gather_tensor_compile, test_reduce_scatter_tensor_compile and
test_all_to_all_single_compile fail: "The test class is MultiThreadedTestCase that uses the
"threaded" PG. This exposes that dynamo's MetricsContext is not thread safe when all ranks attempt
to use torch.compile()." (traceback from the rank threads, via run_test_with_threaded_pg).

Adaptation:
- the four test bodies are copied from test/distributed/test_functional_differentials.py
  (world_size 4, `@torch.compile(fullgraph=True)` around a functional collective, backward,
  gradient check); `self.assertEqual` becomes `torch.testing.assert_close`;
- MultiThreadedTestCase (its module needs expecttest, absent here) is replaced by what it does
  for a test: install the threaded PG, start world_size threads that each
  `init_process_group(backend="threaded")`, run the test body, record an exception, destroy the
  group; threads joined with a 120 s deadline per test;
- the four tests run one after another; the program prints each rank's traceback and exits 1
  when any rank failed (a failing test).
"""
import sys
import threading
import traceback

import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as fcols
from torch.testing._internal.distributed.multi_threaded_pg import (
    _install_threaded_pg,
    _uninstall_threaded_pg,
)

WORLD_SIZE = 4


def test_all_reduce_compile():
    group_name = dist.group.WORLD.group_name

    @torch.compile(fullgraph=True)
    def compiled_fn(tensor):
        output = fcols.all_reduce(tensor, "sum", group=group_name)
        return output.sum()

    input_tensor = torch.randn(3, 3, requires_grad=True)
    loss = compiled_fn(input_tensor)
    loss.backward()
    assert input_tensor.grad is not None
    torch.testing.assert_close(input_tensor.grad, torch.full((3, 3), fill_value=float(WORLD_SIZE)))


def test_all_gather_tensor_compile():
    group_name = dist.group.WORLD.group_name

    @torch.compile(fullgraph=True)
    def compiled_fn(tensor):
        output = fcols.all_gather_tensor(tensor, gather_dim=0, group=group_name)
        return output.sum()

    input_tensor = torch.randn(3, 3, 3, requires_grad=True)
    loss = compiled_fn(input_tensor)
    loss.backward()
    assert input_tensor.grad is not None
    torch.testing.assert_close(input_tensor.grad, torch.full((3, 3, 3), fill_value=float(WORLD_SIZE)))


def test_reduce_scatter_tensor_compile():
    group_name = dist.group.WORLD.group_name

    @torch.compile(fullgraph=True)
    def compiled_fn(tensor):
        output = fcols.reduce_scatter_tensor(tensor, "sum", scatter_dim=0, group=group_name)
        return output.sum()

    input_tensor = torch.randn(4 * WORLD_SIZE, 3, requires_grad=True)
    loss = compiled_fn(input_tensor)
    loss.backward()
    assert input_tensor.grad is not None
    torch.testing.assert_close(input_tensor.grad, torch.ones_like(input_tensor))


def test_all_to_all_single_compile():
    group_name = dist.group.WORLD.group_name

    @torch.compile(fullgraph=True)
    def compiled_fn(tensor):
        output = fcols.all_to_all_single(
            tensor, output_split_sizes=None, input_split_sizes=None, group=group_name
        )
        return output.sum()

    input_tensor = torch.randn(4 * WORLD_SIZE, 3, requires_grad=True)
    loss = compiled_fn(input_tensor)
    loss.backward()
    assert input_tensor.grad is not None
    torch.testing.assert_close(input_tensor.grad, torch.ones_like(input_tensor))


def run_threaded(test):
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    failures = []
    try:
        world = _install_threaded_pg()
        store = dist.HashStore()

        def worker(rank):
            dist.init_process_group(backend="threaded", rank=rank, world_size=WORLD_SIZE, store=store)
            try:
                test()
            except BaseException:
                failures.append((rank, traceback.format_exc()))
            finally:
                if world == dist.distributed_c10d._world:
                    dist.destroy_process_group()

        threads = [threading.Thread(target=worker, args=(r,)) for r in range(WORLD_SIZE)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        if any(t.is_alive() for t in threads):
            failures.append((-1, "rank threads still running after the deadline\n"))
    finally:
        _uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
    return failures


failed = 0
for test in (test_all_reduce_compile, test_all_gather_tensor_compile,
             test_reduce_scatter_tensor_compile, test_all_to_all_single_compile):
    failures = run_threaded(test)
    print(f"{test.__name__}: {'FAIL' if failures else 'ok'} ({len(failures)} rank(s) failed)")
    for rank, tb in failures[:2]:
        print(f"--- rank {rank} ---")
        print(tb)
    failed += bool(failures)
sys.exit(1 if failed else 0)
