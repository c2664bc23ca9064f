"""The process runtime every command and producer shares: exit codes, stop signals, the wait
notice, process-wide tuning and pid checks. Low floor: imports nothing of the project but the contract."""
