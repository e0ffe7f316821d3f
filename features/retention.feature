Feature: Retention applied by the serving process
  In order not to keep every checkpoint of a long-lived sandbox forever
  As an agent runtime that checkpoints before every decision
  I want the process serving a sandbox to apply the default retention
  policy on its own: the last 100 checkpoints and those of the last 7 days
  stay

  Background:
    Given a base directory with these files:
      | path      | content |
      | README.md | hello   |
    And a sandbox "work" over the base

  Scenario: Week-old checkpoints beyond the last 100 go on their own
    Given the sandbox "work" has 103 checkpoints "c1" to "c103", the oldest 3 of them 8 days old
    When I mount the sandbox "work" with the retention applied every 100 ms
    Then within 10 s the checkpoints of "work" are "c4" to "c103"
    And every checkpoint of "work" verifies
    And "README.md" in the mount contains "hello"
