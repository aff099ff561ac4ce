ExUnit.start(capture_log: true)
