/*
 * test-list.h -- every evl_unit test case, one XX(name) a line.
 *
 * tests/unit/CMakeLists.txt reads this file at configure time (one ctest
 * entry per line, named unit.<name>); runner.c expands it into the table
 * `evl_unit NAME` looks names up in.  Each name needs a TEST_IMPL(name)
 * in one of the test-*.c files.  Cases named stress_* run serially.
 */
#ifndef EVL_UNIT_TEST_LIST_H
#define EVL_UNIT_TEST_LIST_H

#define TEST_LIST(XX) \
    XX(error_table) \
    XX(error_unknown) \
    XX(error_int_min) \
    XX(timer_heap_random) \
    XX(timer_equal_deadlines) \
    XX(timer_equal_deadlines_across_iterations) \
    XX(timer_stop_due_in_ready_queue) \
    XX(timer_restart_due_in_ready_queue) \
    XX(timer_rearm_in_callback) \
    XX(timer_zero_initialised) \
    XX(timer_call_later) \
    XX(timer_virtual_clock) \
    XX(timer_sleep_order) \
    XX(timer_real_clock_sleep) \
    XX(timer_huge_delay) \
    XX(queue_intrusive) \
    XX(queue_fifo) \
    XX(queue_next_iteration) \
    XX(queue_batch_order) \
    XX(loop_stop_and_rerun) \
    XX(loop_run_busy) \
    XX(loop_run_until_complete) \
    XX(loop_call_soon_threadsafe) \
    XX(loop_options) \
    XX(future_set_result) \
    XX(future_set_error) \
    XX(future_cancel) \
    XX(future_done_callbacks_order) \
    XX(future_remove_done) \
    XX(future_add_done_on_done) \
    XX(future_unref_in_done_callback) \
    XX(future_refcount) \
    XX(future_many_waiters) \
    XX(future_abandoned) \
    XX(future_unref_unawaited) \
    XX(task_spawn_schedules) \
    XX(task_spawn_from_task) \
    XX(task_result_and_error) \
    XX(task_error_propagates) \
    XX(task_await_outside_task) \
    XX(task_await_self) \
    XX(task_await_done_no_suspend) \
    XX(task_names_and_ids) \
    XX(task_states) \
    XX(task_parent_ids) \
    XX(task_yield_round_robin) \
    XX(task_large_stack_use) \
    XX(task_stack_reuse) \
    XX(cancel_sleeping) \
    XX(cancel_not_started) \
    XX(cancel_awaiting_task) \
    XX(cancel_woken_not_run) \
    XX(cancel_woken_by_timer_not_run) \
    XX(cancel_swallow) \
    XX(cancel_twice_delivers_once) \
    XX(cancel_pending_at_return) \
    XX(cancel_yielded) \
    XX(cancel_done_task) \
    XX(gather_argument_order) \
    XX(gather_first_error) \
    XX(gather_collect) \
    XX(gather_cancel_children) \
    XX(gather_cancel_future) \
    XX(gather_empty) \
    XX(gather_plain_futures) \
    XX(gather_invalid_children) \
    XX(wait_for_timeout) \
    XX(wait_for_in_time) \
    XX(wait_for_swallowed) \
    XX(wait_for_outer_cancelled) \
    XX(wait_for_zero_timeout) \
    XX(io_socketpair_pingpong) \
    XX(io_bulk_transfer) \
    XX(io_wait_fd_busy) \
    XX(io_wait_fd_both_writable) \
    XX(io_close_wakes_waiter) \
    XX(io_cancel_wait) \
    XX(io_hangup) \
    XX(io_pipe) \
    XX(io_fd_reuse_after_close) \
    XX(io_tcp_accept_connect) \
    XX(io_tcp_many_clients) \
    XX(io_tcp_connect_refused) \
    XX(executor_result_and_thread) \
    XX(executor_many_jobs) \
    XX(executor_submit_future) \
    XX(executor_cancel_awaiting_task) \
    XX(executor_cancel_not_started) \
    XX(executor_loop_free_with_jobs) \
    XX(leak_pending_at_close) \
    XX(leak_pending_count_quiet) \
    XX(leak_unretrieved_error) \
    XX(debug_slow_step_warning) \
    XX(debug_off_no_warning) \
    XX(stack_overflow_report) \
    XX(stack_overflow_other_segv) \
    XX(loop_free_with_references) \
    XX(loop_free_releases_memory) \
    XX(loop_free_pending_call_later) \
    XX(loop_free_queued_done_callback) \
    XX(loop_free_pending_task_done_callback) \
    XX(threads_two_loops) \
    XX(stress_threads_many_tasks) \
    XX(stress_1e6_tasks) \
    XX(stress_1e5_sleepers) \
    XX(stress_cancel_storm) \

#endif /* EVL_UNIT_TEST_LIST_H */
