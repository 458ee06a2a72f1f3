"""What the tests share: Spark inputs and sessions, model tables, the readers nobody here wrote (run in child
processes), fault and soak streams, the Debezium fixture generator and the docs examples runner."""
