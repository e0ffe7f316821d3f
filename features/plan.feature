Feature: Plans, decisions and corrections
  In order to undo a wrong decision of an agent without losing what it did
  As an agent runtime
  I want Strata to checkpoint before each decision of a plan, revert to the
  last clean checkpoint or append a correction, and apply the result to the
  base only when the plan is done

  Background:
    Given a base directory with these files:
      | path      | content |
      | a.txt     | base    |
      | keep.txt  | keep    |
    And a sandbox "work" over the base
    And the sandbox "work" is mounted
    And I create the plan "p" in "work"
    And I begin the decision "D1" of "p"
    And I write "one" to "a.txt" in the mount
    And I write "b" to "b.txt" in the mount
    And I end the decision "D1" of "p"
    And I begin the decision "D2" of "p"
    And I write "two" to "a.txt" in the mount
    And I write "c" to "c.txt" in the mount
    And I end the decision "D2" of "p" as failed
    And I begin the decision "D3" of "p"
    And I write "d" to "d.txt" in the mount
    And I end the decision "D3" of "p"

  Scenario: Three decisions, the second fails, and a revert goes back to before it
    Then "p" has 3 checkpoints
    When I revert "p" to the last clean checkpoint because "D2 broke the build"
    Then "a.txt" in the mount contains "one"
    And "b.txt" in the mount contains "b"
    And "c.txt" does not exist in the mount
    And "d.txt" does not exist in the mount
    And the decisions of "p" are:
      | decision | status   | re-execute |
      | D1       | done     | no         |
      | D2       | reverted | yes        |
      | D3       | reverted | yes        |
    When I export the archive of the last correction of "p"
    Then the export has "a.txt" containing "two"
    And the export has "c.txt" containing "c"
    And the export has "d.txt" containing "d"
    And the base is unchanged

  Scenario: An appended correction keeps everything and adds a step
    When I append a correction to "p" because "c.txt is wrong" with the step "rewrite c.txt"
    Then "a.txt" in the mount contains "two"
    And "c.txt" in the mount contains "c"
    And "d.txt" in the mount contains "d"
    And "p" has 4 checkpoints
    And the decisions of "p" are:
      | decision     | status     | re-execute |
      | D1           | done       | no         |
      | D2           | failed     | no         |
      | D3           | done       | no         |
      | correction-1 | correction | no         |

  Scenario: Roll back to a middle checkpoint by its id
    When I roll the plan "p" back to the checkpoint of step 2
    Then "a.txt" in the mount contains "one"
    And "b.txt" in the mount contains "b"
    And "c.txt" does not exist in the mount
    And "d.txt" does not exist in the mount
    And the decisions of "p" are:
      | decision | status   | re-execute |
      | D1       | done     | no         |
      | D2       | reverted | yes        |
      | D3       | reverted | yes        |

  Scenario: Pruning keeps an open plan's checkpoints until it is complete
    When I create the checkpoint "after" of "work"
    And I prune "work" keeping the last 1 checkpoint
    Then the prune kept 3 checkpoints for open plans
    And "p" has 3 checkpoints
    When I revert "p" to the last clean checkpoint because "D2 broke the build"
    Then "a.txt" in the mount contains "one"
    And "c.txt" does not exist in the mount
    When I complete the plan "p"
    And I prune "work" keeping the last 1 checkpoint
    Then the prune kept 0 checkpoints for open plans
    And "p" has 0 checkpoints
    And "a.txt" in the mount contains "one"

  Scenario: Apply writes the base, then rollback and revert refuse
    When I delete "keep.txt" in the mount
    And I apply the plan "p"
    Then the plan "p" is applied
    And "a.txt" in the base contains "two"
    And "c.txt" in the base contains "c"
    And "d.txt" in the base contains "d"
    And "keep.txt" does not exist in the base
    When I try to roll the plan "p" back to the checkpoint of step 2
    Then the command fails with exit code 1
    And the error says "plan already applied"
    When I try to revert "p" to the last clean checkpoint because "too late"
    Then the command fails with exit code 1
    And the error says "plan already applied"
    When I try to roll "work" back to the checkpoint "p/1/before-step"
    Then the command fails with exit code 1
    And the error says "recorded before a plan apply"
    And "a.txt" in the base contains "two"
    And "a.txt" in the mount contains "two"

  Scenario: Apply carries extended attributes and ACLs
    When I run setfacl -m u:65534:r on "a.txt" in the mount
    And I set the attribute "user.origin" of "keep.txt" to "agent" in the mount
    And I apply the plan "p"
    Then the plan "p" is applied
    And "a.txt" in the base contains "two"
    And getfacl of "a.txt" in the base shows "user:65534:r--"
    And "keep.txt" in the base contains "keep"
    And "keep.txt" in the base has the attribute "user.origin" set to "agent"

  Scenario: Apply refuses when the base changed under the sandbox
    When someone writes "theirs" to "a.txt" in the base
    And I try to apply the plan "p"
    Then the command fails with exit code 1
    And the error says "a.txt (changed in base)"
    And the base is unchanged
    And "a.txt" in the mount contains "two"

  Scenario: Bad input is refused and changes nothing
    When I try to end the decision "D9" of "p"
    Then the command fails with exit code 1
    And the error says "step not begun"
    When I try to end the decision "D1" of "nope"
    Then the command fails with exit code 1
    And the error says "not found"
    When I revert "p" to the last clean checkpoint because "D2 broke"
    And I try to revert "p" to the last clean checkpoint because "again"
    Then the command fails with exit code 1
    And the error says "no failed decision"
    And "a.txt" in the mount contains "one"

  Scenario: A restart between any two steps changes nothing
    When I restart strata serving "work" and nothing of "p" changes
    And I revert "p" to the last clean checkpoint because "D2 broke"
    And I restart strata serving "work" and nothing of "p" changes
    And I begin the decision "D2" of "p"
    And I restart strata serving "work" and nothing of "p" changes
    And I write "two again" to "a.txt" in the mount
    And I restart strata serving "work" and nothing of "p" changes
    And I end the decision "D2" of "p"
    And I restart strata serving "work" and nothing of "p" changes
    And I append a correction to "p" because "note" with the step "check"
    And I restart strata serving "work" and nothing of "p" changes
    And I roll the plan "p" back to the checkpoint of step 2
    And I restart strata serving "work" and nothing of "p" changes
    And I apply the plan "p"
    And I restart strata serving "work" and nothing of "p" changes
    Then the plan "p" is applied
    And "a.txt" in the base contains "one"
    And "b.txt" in the base contains "b"
    And "c.txt" does not exist in the base
